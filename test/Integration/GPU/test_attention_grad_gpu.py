"""fa3.attention_grad on the GPU: fa3-run --device=cuda on a function that
runs the forward and the backward (O and LSE of fa3's own forward feed the
backward), and the C API's GradKernel in this process, against the float64
gradient (torch autograd of a float64 attention at the rounded inputs).

The yardstick is PyTorch's own error: autograd of F.scaled_dot_product_attention
in the same dtype on CUDA, against the same float64 reference. Per gradient
tensor: max |fa3 - ref| <= 2 * max |SDPA - ref| + 1e-4; O and LSE as in
test_attention_gpu.py (O: 2 * SDPA's error + 1e-5 over the rows that see a
key; LSE: 1e-3 relative). Outputs are poisoned (NaN) before the launch; NaN
anywhere fails. Rows that see no key: O = 0, LSE = -inf, dQ = 0 exactly; keys
that no query sees: dK = dV = 0 exactly.

SDPA yardstick, first of these that runs (fused kernels before the math
backend, which computes reduced-precision inputs in float32 and would make
the yardstick a float32 one):
  FLASH with enable_gqa (no mask: non-causal, or causal with Sq == Sk via
  is_causal), EFFICIENT (no GQA support: MHA, or K/V repeated over the group,
  autograd summing dK/dV over it; takes an explicit mask), cuDNN with
  enable_gqa, then MATH. Masks are explicit booleans built with the
  bottom-right rule (fa3.reference.visible). Query rows that see no key are
  left out of SDPA's call (no backend defines them) and get dQ = 0.
"""

import dataclasses
import math
import os
import subprocess
import time
import warnings
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import fa3
from fa3 import reference


@dataclasses.dataclass
class GradCase:
    b: int
    sq: int
    sk: int
    d: int
    hq: int = 8
    hkv: int = 2
    dtype: str = "bf16"
    causal: bool = False
    window: tuple = (-1, -1)

    def id(self):
        s = f"b{self.b}-sq{self.sq}-sk{self.sk}-d{self.d}-h{self.hq}x{self.hkv}-{self.dtype}"
        if self.causal:
            s += "-causal"
        if self.window != (-1, -1):
            s += f"-win{self.window[0]}_{self.window[1]}"
        return s

    def types(self):
        e = self.dtype
        return (f"tensor<?x?x{self.hq}x{self.d}x{e}>", f"tensor<?x?x{self.hkv}x{self.d}x{e}>",
                f"tensor<?x{self.hq}x?xf32>")

    def attrs(self):
        attrs = []
        if self.causal:
            attrs.append("causal")
        if self.window != (-1, -1):
            attrs.append(f"window = array<i64: {self.window[0]}, {self.window[1]}>")
        return " {" + ", ".join(attrs) + "}" if attrs else ""

    def mlir_fwd_bwd(self):
        qt, kt, lt = self.types()
        a = self.attrs()
        return (f"func.func @fwd_bwd(%q: {qt}, %k: {kt}, %v: {kt}, %do: {qt}) -> ({qt}, {lt}, {qt}, {kt}, {kt}) {{\n"
                f"  %o, %lse = fa3.attention %q, %k, %v{a} : ({qt}, {kt}, {kt}) -> ({qt}, {lt})\n"
                f"  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse{a}"
                f" : ({qt}, {qt}, {kt}, {kt}, {qt}, {lt}) -> ({qt}, {kt}, {kt})\n"
                f"  return %o, %lse, %dq, %dk, %dv : {qt}, {lt}, {qt}, {kt}, {kt}\n}}\n")

    def mlir_fwd(self):
        qt, kt, lt = self.types()
        return (f"func.func @attn(%q: {qt}, %k: {kt}, %v: {kt}) -> ({qt}, {lt}) {{\n"
                f"  %o, %lse = fa3.attention %q, %k, %v{self.attrs()} : ({qt}, {kt}, {kt}) -> ({qt}, {lt})\n"
                f"  return %o, %lse : {qt}, {lt}\n}}\n")

    def mlir_grad(self):
        qt, kt, lt = self.types()
        return (f"func.func @attn_grad(%do: {qt}, %q: {qt}, %k: {kt}, %v: {kt}, %o: {qt}, %lse: {lt})"
                f" -> ({qt}, {kt}, {kt}) {{\n"
                f"  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse{self.attrs()}"
                f" : ({qt}, {qt}, {kt}, {kt}, {qt}, {lt}) -> ({qt}, {kt}, {kt})\n"
                f"  return %dq, %dk, %dv : {qt}, {kt}, {kt}\n}}\n")


def _cases():
    cases = []
    # Every head dim, both dtypes, causal and not; GQA 8:2, ragged 1000.
    for d in (64, 128, 256):
        for dtype in ("bf16", "f16"):
            for causal in (False, True):
                cases.append(GradCase(b=2, sq=1000, sk=1000, d=d, dtype=dtype, causal=causal))
    # Sq != Sk and ragged lengths (1, 17, 1000), d128 bf16 GQA 8:2 (the
    # kernels of the block above), causal (bottom-right) and not.
    for sq, sk in [(1000, 4096), (4096, 1000), (17, 1000), (1000, 17), (1, 1000), (1, 1), (17, 17)]:
        for causal in (False, True):
            cases.append(GradCase(b=1 if sq * sk > 10**6 else 3, sq=sq, sk=sk, d=128, causal=causal))
    # The same at d64 (128-row query steps: rows past Sq inside a step) and
    # d256 (the warpgroups split each step's query columns).
    for d in (64, 256):
        for sq, sk in [(17, 1000), (1000, 17), (1, 1000)]:
            for causal in (False, True):
                cases.append(GradCase(b=3, sq=sq, sk=sk, d=d, dtype="bf16" if d == 64 else "f16",
                                      causal=causal))
    # Long sequences with GQA 16:2, every head dim.
    cases += [
        GradCase(b=1, sq=4096, sk=4096, d=64, hq=16, hkv=2),
        GradCase(b=1, sq=4096, sk=4096, d=128, hq=16, hkv=2, causal=True),
        GradCase(b=1, sq=4096, sk=4096, d=256, hq=16, hkv=2, dtype="f16", causal=True),
    ]
    # MHA.
    cases += [
        GradCase(b=2, sq=1000, sk=1000, d=64, hq=4, hkv=4, causal=True),
        GradCase(b=1, sq=17, sk=4096, d=256, hq=4, hkv=4, dtype="f16"),
    ]
    # Sliding windows (the second leaves keys < 2840 unseen, the third leaves
    # query rows < 3032 without a key).
    cases += [
        GradCase(b=1, sq=1000, sk=1000, d=128, window=(128, 0), causal=True),
        GradCase(b=2, sq=1000, sk=4096, d=64, window=(256, 256)),
        GradCase(b=1, sq=4096, sk=1000, d=256, window=(-1, 64), dtype="f16"),
    ]
    return cases


CASES = _cases()


def _torch_dtype(dtype):
    return torch.bfloat16 if dtype == "bf16" else torch.float16


def _inputs(case, seed, device="cuda"):
    """q, k, v, do: torch.randn on the CPU from a per-case seed, rounded to
    the case's dtype, moved to `device`."""
    gen = torch.Generator().manual_seed(seed)
    shapes = ((case.b, case.sq, case.hq, case.d), (case.b, case.sk, case.hkv, case.d),
              (case.b, case.sk, case.hkv, case.d), (case.b, case.sq, case.hq, case.d))
    return [torch.randn(s, generator=gen).to(_torch_dtype(case.dtype)).to(device) for s in shapes]


def _reference_f64(q, k, v, do, case, mask):
    """O, LSE and the gradients in float64, by torch autograd of a float64
    attention on the GPU at the rounded inputs. K/V are repeated over the
    group (autograd sums dK/dV over it); the softmax subtracts a detached
    row max and divides by max(l, 1) so that rows without a key give O = 0
    and zero gradients instead of NaN."""
    group = case.hq // case.hkv
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    kk = k64.repeat_interleave(group, dim=2)
    vv = v64.repeat_interleave(group, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q64, kk) / math.sqrt(case.d)
    s = s.masked_fill(~mask, float("-inf"))
    m = s.detach().amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    del s
    l = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(l > 0, l, torch.ones_like(l))
    del e
    o = torch.einsum("bhqk,bkhd->bqhd", p, vv)
    del p
    dq, dk, dv = torch.autograd.grad(o, (q64, k64, v64), do.double())
    l, m = l.detach()[..., 0], m[..., 0]
    lse = torch.where(l > 0, torch.log(torch.where(l > 0, l, torch.ones_like(l))) + m,
                      torch.full_like(l, float("-inf")))
    return o.detach(), lse, dq, dk, dv


# (layout, backend): "gqa" passes K/V with Hkv heads (enable_gqa=True when
# Hq != Hkv), "repeat" repeats them over the group.
_SDPA_TRIES = (
    ("gqa", SDPBackend.FLASH_ATTENTION),
    ("gqa", SDPBackend.EFFICIENT_ATTENTION),
    ("repeat", SDPBackend.EFFICIENT_ATTENTION),
    ("gqa", SDPBackend.CUDNN_ATTENTION),
    ("gqa", SDPBackend.MATH),
)


def _sdpa(q, k, v, do, case, mask):
    """SDPA's O, dQ, dK, dV (float64, fa3's layouts) in the case's dtype, and
    which (layout, backend) computed them."""
    group = case.hq // case.hkv
    plain = case.window == (-1, -1)
    square_causal = case.causal and plain and case.sq == case.sk
    rows = mask.any(dim=1)  # query rows that see a key
    every_row = bool(rows.all())
    qs, dos, ms = (q, do, mask) if every_row else (q[:, rows], do[:, rows], mask[rows])
    kwargs = {}
    if square_causal:
        kwargs["is_causal"] = True
    elif case.causal or not plain:
        kwargs["attn_mask"] = ms
    errors = []
    for layout, backend in _SDPA_TRIES:
        if layout == "repeat" and group == 1:
            continue
        kw = dict(kwargs)
        if layout == "gqa" and group > 1:
            kw["enable_gqa"] = True
        ql, kl, vl = (x.detach().clone().requires_grad_() for x in (qs, k, v))
        kk, vv = (kl, vl) if layout == "gqa" else (kl.repeat_interleave(group, 2), vl.repeat_interleave(group, 2))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with sdpa_kernel([backend]):
                    out = F.scaled_dot_product_attention(ql.transpose(1, 2), kk.transpose(1, 2),
                                                         vv.transpose(1, 2), **kw)
                dq, dk, dv = torch.autograd.grad(out, (ql, kl, vl), dos.transpose(1, 2))
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 (this backend does not take the case: try the next)
            errors.append(f"{layout}/{backend.name}: {str(e).splitlines()[0][:100]}")
            continue
        o = out.detach().transpose(1, 2).double()
        if not every_row:
            o_full = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
            dq_full = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
            o_full[:, rows] = o
            dq_full[:, rows] = dq.double()
            o, dq = o_full, dq_full
        return o, dq.double(), dk.double(), dv.double(), f"{layout}/{backend.name}"
    raise AssertionError("no SDPA backend ran: " + "; ".join(errors))


def _max_abs(x):
    return x.abs().max().item() if x.numel() else 0.0


def _check(case, seed, o, lse, dq, dk, dv, q, k, v, do):
    """Asserts fa3's O, LSE, dQ, dK, dV against the float64 reference with
    SDPA's errors as the yardstick; returns the line to print."""
    dev = q.device
    assert o.shape == (case.b, case.sq, case.hq, case.d)
    assert lse.shape == (case.b, case.hq, case.sq)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    for name, x in (("O", o), ("LSE", lse), ("dQ", dq), ("dK", dk), ("dV", dv)):
        assert not torch.isnan(x).any(), f"NaN in {name} (an element was not written?) (seed {seed})"
    for name, x in (("O", o), ("dQ", dq), ("dK", dk), ("dV", dv)):
        assert torch.isfinite(x).all(), f"inf in {name} (seed {seed})"

    mask = torch.from_numpy(reference.visible(case.sq, case.sk, case.causal, case.window)).to(dev)
    ref_o, ref_lse, ref_dq, ref_dk, ref_dv = _reference_f64(q, k, v, do, case, mask)
    seen = torch.isfinite(ref_lse)  # [B, Hq, Sq]
    seen_rows = seen.permute(0, 2, 1)  # [B, Sq, Hq]
    row_has_key = mask.any(dim=1)  # [Sq]
    key_is_seen = mask.any(dim=0)  # [Sk]
    assert torch.equal(torch.isneginf(lse), ~seen), f"rows with LSE = -inf differ from the reference (seed {seed})"
    assert (o[~seen_rows] == 0).all(), "a row that sees no key has O != 0"
    assert (dq[:, ~row_has_key] == 0).all(), "a row that sees no key has dQ != 0"
    assert (dk[:, ~key_is_seen] == 0).all(), "a key that no query sees has dK != 0"
    assert (dv[:, ~key_is_seen] == 0).all(), "a key that no query sees has dV != 0"

    s_o, s_dq, s_dk, s_dv, backend = _sdpa(q, k, v, do, case, mask)

    errs = {}
    o_err = _max_abs((o - ref_o)[seen_rows])
    o_sdpa = _max_abs((s_o - ref_o)[seen_rows])
    lse_err = (lse - ref_lse).abs()[seen]
    lse_bound = 1e-3 * (1 + ref_lse.abs()[seen])
    for name, x, s, r in (("dQ", dq, s_dq, ref_dq), ("dK", dk, s_dk, ref_dk), ("dV", dv, s_dv, ref_dv)):
        errs[name] = (_max_abs(x - r), _max_abs(s - r), _max_abs(r))
    line = (f"{case.id()}: O {o_err:.2e} (SDPA {o_sdpa:.2e}), LSE {_max_abs(lse_err):.2e}, "
            + ", ".join(f"{n} {e:.2e} (SDPA {s:.2e}, max|ref| {r:.2e})" for n, (e, s, r) in errs.items())
            + f" [SDPA {backend}]")
    print(line)

    assert o_err <= 2 * o_sdpa + 1e-5, f"O error {o_err:.3g} > 2 x SDPA's {o_sdpa:.3g} + 1e-5 (seed {seed})"
    # LSE: see test_attention_gpu.py.
    assert (lse_err <= lse_bound).all(), f"LSE error {_max_abs(lse_err):.3g} over its bound (seed {seed})"
    bad = [f"{n} error {e:.3g} > 2 x SDPA's {s:.3g} + 1e-4" for n, (e, s, _) in errs.items() if e > 2 * s + 1e-4]
    assert not bad, "; ".join(bad) + f" (seed {seed}; {line})"
    return line


def _seed(case):
    base = int(os.environ.get("FA3_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    return base, zlib.crc32(case.id().encode()) ^ base


@pytest.mark.parametrize("case", CASES, ids=[c.id() for c in CASES])
def test_attention_grad_gpu_matches_reference(case, fa3_run, tmp_path):
    base, seed = _seed(case)
    q, k, v, do = _inputs(case, seed)

    (tmp_path / "fwd_bwd.mlir").write_text(case.mlir_fwd_bwd())
    # fa3-run reads f16 as float16 and bf16 as float32 rounded to bf16, and
    # writes its results the same way (LSE: float32).
    np_dtype = np.float16 if case.dtype == "f16" else np.float32
    for name, x in (("q", q), ("k", k), ("v", v), ("do", do)):
        np.save(tmp_path / f"{name}.npy", x.float().cpu().numpy().astype(np_dtype))
    outs = ("o", "lse", "dq", "dk", "dv")
    for name in outs:
        np.save(tmp_path / f"{name}.npy", np.full((1,), np.nan, np.float32))
    cmd = [fa3_run, str(tmp_path / "fwd_bwd.mlir"), "--function=fwd_bwd", "--device=cuda"]
    cmd += [f"--input=@{tmp_path / n}.npy" for n in ("q", "k", "v", "do")]
    cmd += [f"--output=@{tmp_path / n}.npy" for n in outs]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    print(f"{case.id()}: fa3-run {time.monotonic() - start:.1f} s (compile or cache, copies, fwd + bwd)")
    assert proc.returncode == 0, f"fa3-run failed (FA3_TEST_SEED={base}):\n{proc.stderr}"
    o, lse, dq, dk, dv = (torch.from_numpy(np.load(tmp_path / f"{n}.npy")).cuda().double() for n in outs)
    _check(case, f"FA3_TEST_SEED={base}", o, lse, dq, dk, dv, q, k, v, do)
    torch.cuda.empty_cache()


CAPI_CASE = GradCase(b=2, sq=777, sk=1234, d=128, causal=True)  # ragged both ways, Sq != Sk, GQA 8:2


def test_compile_mlir_grad_causal_gqa_matches_reference():
    case = CAPI_CASE
    base, seed = _seed(case)
    q, k, v, do = _inputs(case, seed)
    fwd = fa3.compile_mlir(case.mlir_fwd(), "attn")
    bwd = fa3.compile_mlir(case.mlir_grad(), "attn_grad", backward=True)
    need = bwd.workspace_bytes(case.b, case.sq, case.sk)
    assert need >= 0
    o = torch.full_like(q, float("nan"))
    lse = torch.full((case.b, case.hq, case.sq), float("nan"), device="cuda")

    def poisoned():
        return torch.full_like(q, float("nan")), torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))

    # On a side stream, the workspace allocated by launch_grad_into().
    dq, dk, dv = poisoned()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fwd.launch_into(q, k, v, o, lse)
        bwd.launch_grad_into(do, q, k, v, o, lse, dq, dk, dv)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    print(f"backward {bwd.name} (cache hit: {bwd.cache_hit}), workspace {need} bytes")
    _check(case, f"FA3_TEST_SEED={base}", o.double(), lse.double(), dq.double(), dk.double(), dv.double(),
           q, k, v, do)

    # A caller's workspace, poisoned, reused by two launches on the current
    # stream: the launch must not depend on what the workspace holds.
    ws = torch.full((max(need, 1),), 0xFF, dtype=torch.uint8, device="cuda")
    for _ in range(2):
        dq, dk, dv = poisoned()
        bwd.launch_grad_into(do, q, k, v, o, lse, dq, dk, dv, workspace=ws)
        torch.cuda.synchronize()
        _check(case, f"FA3_TEST_SEED={base}", o.double(), lse.double(), dq.double(), dk.double(), dv.double(),
               q, k, v, do)


def test_compile_mlir_grad_reports_errors():
    with pytest.raises(fa3.Error, match="nope"):
        fa3.compile_mlir(CAPI_CASE.mlir_grad(), "nope", backward=True)
    # A forward-only function is not a backward.
    with pytest.raises(fa3.Error, match="compile it with fa3_compile_attention"):
        fa3.compile_mlir(CAPI_CASE.mlir_fwd(), "attn", backward=True)
