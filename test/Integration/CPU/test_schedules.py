"""fa3.schedules reads the compiler's cost model: its default forward
schedule is, field for field, what fa3-select-schedule (target sm_90a) writes
on a dynamic-length attention, and each A/B structure changes only its own
field."""

import re
import subprocess

import pytest

from fa3 import schedules


def _pass_schedule(fa3_opt, d, causal=False, sq="?", sk="?", fp8=False):
    """The #fa3.schedule fa3-select-schedule (sm_90a) writes on a bf16
    attention (with `fp8`, an e4m3 one with its descales) of head dim d with
    these lengths ("?": dynamic)."""
    elt = "f8E4M3FN" if fp8 else "bf16"
    q, k = f"tensor<2x{sq}x8x{d}x{elt}>", f"tensor<2x{sk}x8x{d}x{elt}>"
    o, lt = f"tensor<2x{sq}x8x{d}xbf16>", f"tensor<2x8x{sq}xf32>"
    ds = "tensor<2x8xf32>"
    attrs = " {causal}" if causal else ""
    args, operands, types = ((f", %qd: {ds}, %kd: {ds}, %vd: {ds}", ", %qd, %kd, %vd", f", {ds}, {ds}, {ds}")
                             if fp8 else ("", "", ""))
    source = (f"func.func @f(%q: {q}, %k: {k}, %v: {k}{args}) -> ({o}, {lt}) {{\n"
              f"  %o, %lse = fa3.attention %q, %k, %v{operands}{attrs} : ({q}, {k}, {k}{types}) -> ({o}, {lt})\n"
              f"  return %o, %lse : {o}, {lt}\n}}\n")
    out = subprocess.run([fa3_opt, "--fa3-select-schedule=target=sm_90a"], input=source,
                         capture_output=True, text=True, check=True).stdout
    return re.search(r"#fa3\.schedule<[^>]*>", out).group(0)


@pytest.mark.parametrize("d", [64, 96, 128, 192, 256])
def test_default_is_the_pass_choice(fa3_opt, d):
    assert schedules.hopper_forward(d) == _pass_schedule(fa3_opt, d)


def _fields(attr):
    return dict(re.findall(r"(\w+) = (\w+)", attr))


@pytest.mark.parametrize("d", [64, 128, 256])
def test_structures_change_one_choice(d):
    default = _fields(schedules.hopper_forward(d))
    changed = {
        "ws_no_pp": {"pingpong": "false"},
        "ws_overlap": {"intra_wg_overlap": "true"},
        "ws_no_overlap": {"intra_wg_overlap": "false"},
        "persistent": {"persistent": "true"},
        "no_ws": {"producer_regs": "0", "consumer_regs": "0", "pingpong": "false",
                  "intra_wg_overlap": "false"},
    }
    for structure, fields in changed.items():
        assert _fields(schedules.hopper_forward(d, structure)) == {**default, **fields}, structure
    with pytest.raises(ValueError, match="structure must be one of"):
        schedules.hopper_forward(d, "fast")


def test_n176_is_d128_only():
    assert "block_n = 176" in schedules.hopper_forward(128, "n176_overlap")
    with pytest.raises(ValueError, match="d128 tile"):
        schedules.hopper_forward(64, "n176_overlap")


@pytest.mark.parametrize("d,causal,sq,sk", [
    (64, False, 49, 49), (64, False, 197, 197), (64, True, 4096, 4096), (64, False, 8192, 8192),
    (128, False, 512, 512), (128, True, 512, 512), (128, True, 1024, 1024), (128, False, 8192, 512),
    (128, False, 1, 4096), (256, False, 512, 512), (64, False, 512, 8192), (64, False, 64, 4096),
    (64, False, 8192, 512)])
def test_length_bucket_is_the_pass_choice(fa3_opt, d, causal, sq, sk):
    """The schedule fa3.attention writes into the forward it compiles for a
    launch's (Sq, Sk) is what fa3-select-schedule picks for those lengths."""
    from fa3 import _jit
    from fa3._spec import AttentionSpec
    spec = AttentionSpec("bf16", 8, 8, d, d, causal)
    assert _jit.forward_schedule(spec, sq, sk) == _pass_schedule(fa3_opt, d, causal, sq, sk)


@pytest.mark.parametrize("d,causal,sq,sk", [
    (64, False, 8192, 8192), (128, False, 512, 512), (128, False, 8192, 8192), (128, True, 8192, 8192),
    (256, True, 1024, 1024)])
def test_fp8_length_bucket_is_the_pass_choice(fa3_opt, d, causal, sq, sk):
    """The FP8 forward's length bucket is fa3-select-schedule's choice for
    those lengths too (the persistent grid depends on them)."""
    from fa3 import _jit
    from fa3._spec import AttentionSpec
    spec = AttentionSpec("f8E4M3FN", 8, 8, d, d, causal)
    assert _jit.forward_schedule(spec, sq, sk) == _pass_schedule(fa3_opt, d, causal, sq, sk, fp8=True)


def test_length_bucket_compiles_its_schedule():
    """The runtime's forward for a short key loop at d128 is the persistent
    kernel (its PTX entry says so), the long one is not; FP8 has length
    buckets too (persistent at d128 non-causal up to 1024 keys), the
    fa3-cast-fp8 chain leaves the schedule to the compiler."""
    from fa3 import _jit
    from fa3._spec import AttentionSpec
    spec = AttentionSpec("bf16", 8, 8, 128, 128, True)
    short = _jit.forward_schedule(spec, 512, 512)
    assert "persistent = true" in short and "persistent = true" not in _jit.forward_schedule(spec, 8192, 8192)
    assert f"schedule = {short}" in spec.forward_mlir(short)
    ptx = _jit.get(spec, "ptx", "fwd", schedule=short).ptx
    assert "_persistent" in ptx
    assert "_persistent" not in _jit.get(spec, "ptx", "fwd", schedule=_jit.forward_schedule(spec, 8192, 8192)).ptx
    fp8 = AttentionSpec("f8E4M3FN", 8, 8, 128, 128)
    assert "persistent = true" in _jit.forward_schedule(fp8, 512, 512)
    long_fp8 = _jit.forward_schedule(fp8, 8192, 8192)
    assert "persistent = false" in long_fp8 and "producer_regs = 24" in long_fp8
    assert "_persistent" in _jit.get(fp8, "ptx", "fwd", schedule=_jit.forward_schedule(fp8, 512, 512)).ptx
    assert _jit.forward_schedule(AttentionSpec("bf16", 8, 8, 128, 128, cast_fp8=True), 512, 512) is None
