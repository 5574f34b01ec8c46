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
  tiles).
"""

STRUCTURES = ("default", "no_ws", "ws_no_pp", "ws_overlap", "ws_no_overlap", "n176_overlap", "persistent")


def _flag(value):
    return "true" if value else "false"


def schedule(block_m, block_n, consumer_wgs, producer_regs=0, consumer_regs=0, pingpong=False,
             intra_wg_overlap=False, persistent=False, stages=2, cluster=1):
    """The `#fa3.schedule<...>` attribute with these fields."""
    return (f"#fa3.schedule<block_m = {block_m}, block_n = {block_n}, stages = {stages}, "
            f"consumer_wgs = {consumer_wgs}, producer_regs = {producer_regs}, "
            f"consumer_regs = {consumer_regs}, pingpong = {_flag(pingpong)}, "
            f"intra_wg_overlap = {_flag(intra_wg_overlap)}, persistent = {_flag(persistent)}, "
            f"cluster = {cluster}>")


def hopper_forward_tiles(d):
    """(block_m, block_n, consumer warpgroups) of the bf16/f16 forward at head
    dim d for a dynamic query length."""
    if d <= 64:
        return 192, 128, 3
    if d <= 128:
        return 128, 128, 2
    return 128, 80, 2


def hopper_forward(d, structure="default"):
    """The cost model's forward schedule at head dim d with `structure` (one
    of STRUCTURES)."""
    if structure not in STRUCTURES:
        raise ValueError(f"structure must be one of {', '.join(STRUCTURES)}, got {structure!r}")
    block_m, block_n, wgs = hopper_forward_tiles(d)
    if structure == "n176_overlap":
        if d != 128:
            raise ValueError(f"structure 'n176_overlap' is a d128 tile, got d = {d}")
        block_n = 176
    if structure == "no_ws":
        return schedule(block_m, block_n, wgs)
    producer, consumer = (32, 160) if wgs == 3 else (24, 240)
    two = wgs == 2
    overlap = two and d > 64  # the cost model's choice
    if structure.endswith("_overlap"):
        overlap = structure != "ws_no_overlap"
    return schedule(block_m, block_n, wgs, producer, consumer,
                    pingpong=two and structure != "ws_no_pp",
                    intra_wg_overlap=overlap,
                    persistent=structure == "persistent")
