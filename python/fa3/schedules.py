"""`#fa3.schedule` attributes in MLIR syntax, for `fa3.compile_mlir`.

`schedule(...)` spells one attribute from its fields; `hopper_forward(d,
structure)` is the cost model's forward tiles for head dim `d`
(fa3-select-schedule's, for a dynamic query length) with one kernel
structure changed. The benchmark's A/B columns and the GPU tests use the
same names:

* `default`: the cost model's schedule (warp-specialized; with two
  consumer warpgroups pingpong, and above d = 64 intra-warpgroup overlap);
* `no_ws`: no producer warpgroup;
* `ws_no_pp`: warp-specialized without pingpong;
* `ws_overlap`: with intra-warpgroup overlap;
* `ws_no_overlap`: without intra-warpgroup overlap;
* `n176_overlap`: ws_overlap with FlashAttention-3's 176-key block (d128);
* `persistent`: the default on a persistent grid (one CTA per SM walks the
  tiles);
* `lazy_rescale`: the default with `rescale_threshold = 8` (a row keeps its
  softmax max until a key block raises it by more than 2^8, and O's rescale
  is skipped meanwhile; `fa3-lazy-rescale`).
"""

STRUCTURES = ("default", "no_ws", "ws_no_pp", "ws_overlap", "ws_no_overlap", "n176_overlap", "persistent",
              "lazy_rescale")


def _flag(value):
    return "true" if value else "false"


def schedule(block_m, block_n, consumer_wgs, producer_regs=0, consumer_regs=0, pingpong=False,
             intra_wg_overlap=False, persistent=False, stages=2, cluster=1, rescale_threshold=0,
             poly_exp2=0):
    """The `#fa3.schedule<...>` attribute with these fields
    (`rescale_threshold` and `poly_exp2` written only when set, as the
    compiler prints them)."""
    optional = f", rescale_threshold = {rescale_threshold}" if rescale_threshold else ""
    optional += f", poly_exp2 = {poly_exp2}" if poly_exp2 else ""
    return (f"#fa3.schedule<block_m = {block_m}, block_n = {block_n}, stages = {stages}, "
            f"consumer_wgs = {consumer_wgs}, producer_regs = {producer_regs}, "
            f"consumer_regs = {consumer_regs}, pingpong = {_flag(pingpong)}, "
            f"intra_wg_overlap = {_flag(intra_wg_overlap)}, persistent = {_flag(persistent)}, "
            f"cluster = {cluster}{optional}>")


def hopper_forward_fields(d):
    """The fields of the forward `#fa3.schedule` that fa3-select-schedule
    picks on sm_90a for a 16-bit attention at head dim d and a dynamic query
    length (the compiler's cost model, through fa3._fa3)."""
    from . import _jit  # noqa: PLC0415 (needs the compiled extension)
    return dict(_jit._module().select_forward_schedule(d, False, False, 0, 0))


def hopper_forward_tiles(d):
    """(block_m, block_n, consumer warpgroups) of the bf16/f16 forward at head
    dim d for a dynamic query length."""
    fields = hopper_forward_fields(d)
    return fields["block_m"], fields["block_n"], fields["consumer_wgs"]


def hopper_forward(d, structure="default"):
    """The cost model's forward schedule at head dim d with `structure` (one
    of STRUCTURES)."""
    if structure not in STRUCTURES:
        raise ValueError(f"structure must be one of {', '.join(STRUCTURES)}, got {structure!r}")
    fields = hopper_forward_fields(d)
    if structure == "n176_overlap":
        if d != 128:
            raise ValueError(f"structure 'n176_overlap' is a d128 tile, got d = {d}")
        fields["block_n"] = 176
    if structure == "no_ws":
        fields.update(producer_regs=0, consumer_regs=0, pingpong=False, intra_wg_overlap=False)
    elif structure == "ws_no_pp":
        fields["pingpong"] = False
    elif structure in ("ws_overlap", "n176_overlap"):
        fields["intra_wg_overlap"] = True
    elif structure == "ws_no_overlap":
        fields["intra_wg_overlap"] = False
    elif structure == "persistent":
        fields["persistent"] = True
    elif structure == "lazy_rescale":
        fields["rescale_threshold"] = 8
    return schedule(**fields)
