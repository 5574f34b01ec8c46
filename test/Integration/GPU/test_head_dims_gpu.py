"""fa3.attention on CUDA at head dims the Hopper kernels are not compiled
for (multiples of 8 up to 256 other than 64, 128 and 256) and with v's head
dim different from q's (DeepSeek-style 192 / 128): they run at the next
compiled head dim, q, k and v zero-padded (`_torch._rounded_up`,
`jax._rounded_up`).

Each case checks O, the LSE and the gradients of q, k and v on fresh random
inputs (GQA 4:2, ragged Sq = 129 over Sk = 257, causal aligned bottom-right)
against a float64 attention (torch autograd on the same rounded inputs).
The bound is PyTorch's own error: max |fa3 - ref| <= 2 * max |SDPA - ref| +
1e-4 per tensor, where SDPA is F.scaled_dot_product_attention in the same
dtype on the same inputs (whichever backend PyTorch picks for the head dim);
the LSE within 1e-3 relative (fa3 accumulates it in float32).
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import fa3

CASES = [  # (d, dv, causal, dtype)
    (32, 32, False, torch.bfloat16),
    (40, 40, True, torch.bfloat16),
    (96, 96, False, torch.float16),
    (96, 96, True, torch.bfloat16),
    (160, 160, True, torch.bfloat16),
    (192, 192, False, torch.bfloat16),
    (192, 128, True, torch.bfloat16),
    (64, 32, False, torch.bfloat16),
]
B, SQ, SK, HQ, HKV = 2, 129, 257, 4, 2


def _visible(sq, sk, causal, device):
    if not causal:
        return torch.ones(sq, sk, dtype=torch.bool, device=device)
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    return j <= i + (sk - sq)


def _reference(q, k, v, causal, scale):
    """O [B, Sq, Hq, Dv] and LSE [B, Hq, Sq] of a float64 attention, with K/V
    repeated over each head group."""
    group = q.shape[2] // k.shape[2]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k.repeat_interleave(group, 2), v.repeat_interleave(group, 2)))
    s = (qt @ kt.transpose(-1, -2)) * scale
    s = s.masked_fill(~_visible(q.shape[1], k.shape[1], causal, q.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.softmax(s, dim=-1) @ vt
    return o.transpose(1, 2), lse


def _sdpa(q, k, v, causal, scale):
    """SDPA's memory-efficient backend (it takes the bottom-right mask, any
    head dim that is a multiple of 8 and v's != q's), K/V repeated over the
    group (autograd sums dK/dV over it). Not the math backend: it computes
    bf16/f16 inputs in float32, a tighter yardstick than PyTorch's kernels."""
    group = q.shape[2] // k.shape[2]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k.repeat_interleave(group, 2), v.repeat_interleave(group, 2)))
    mask = _visible(q.shape[1], k.shape[1], causal, q.device)
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale).transpose(1, 2)


def _grads(fn, inputs, do):
    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    out = fn(*leaves)
    out = out[0] if isinstance(out, tuple) else out
    (out * do.to(out.dtype)).sum().backward()  # dLoss/dO = dO exactly
    return out.detach(), [x.grad for x in leaves]


@pytest.mark.parametrize("d,dv,causal,dtype", CASES,
                         ids=[f"d{d}-dv{dv}-{'causal' if c else 'full'}-{str(t)[6:]}" for d, dv, c, t in CASES])
def test_rounded_head_dim_matches_float64(d, dv, causal, dtype):
    torch.manual_seed(d * 1000 + dv + causal)
    q = torch.randn(B, SQ, HQ, d, device="cuda").to(dtype)
    k = torch.randn(B, SK, HKV, d, device="cuda").to(dtype)
    v = torch.randn(B, SK, HKV, dv, device="cuda").to(dtype)
    do = torch.randn(B, SQ, HQ, dv, device="cuda").to(dtype)
    scale = 1.0 / math.sqrt(d)

    ref_o, ref_grads = _grads(lambda *x: _reference(*x, causal, scale), [t.double() for t in (q, k, v)], do)
    _, ref_lse = _reference(q.double(), k.double(), v.double(), causal, scale)
    sdpa_o, sdpa_grads = _grads(lambda *x: _sdpa(*x, causal, scale), [q, k, v], do)
    fa3_o, fa3_grads = _grads(lambda *x: fa3.attention(*x, causal=causal), [q, k, v], do)

    assert fa3_o.shape == (B, SQ, HQ, dv) and fa3_o.dtype == dtype
    for name, got, ours, ref in [("O", fa3_o, sdpa_o, ref_o)] + [
            (n, g, s, r) for n, g, s, r in zip(("dQ", "dK", "dV"), fa3_grads, sdpa_grads, ref_grads)]:
        assert got.shape == ref.shape, name
        assert torch.isfinite(got).all(), name
        err = (got.double() - ref).abs().max().item()
        bound = 2 * (ours.double() - ref).abs().max().item() + 1e-4
        assert err <= bound, f"{name}: max error {err:.3e} > bound {bound:.3e}"

    with torch.no_grad():
        _, lse = fa3.attention(q, k, v, causal=causal, return_lse=True)
    rel = ((lse.double() - ref_lse).abs() / ref_lse.abs().clamp_min(1.0)).max().item()
    assert rel <= 1e-3, f"LSE relative error {rel:.3e}"


def test_rounded_head_dim_under_torch_compile():
    """The padding is traced with the custom op: a compiled call gives the
    eager call's output bit for bit."""
    torch.manual_seed(7)
    q, k, v = (torch.randn(1, 65, 4, 96, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    eager = fa3.attention(q, k, v, causal=True)
    compiled = torch.compile(lambda a, b, c: fa3.attention(a, b, c, causal=True), fullgraph=True)(q, k, v)
    assert torch.equal(eager, compiled)


def test_head_dim_errors_name_the_dim():
    q = torch.zeros(1, 8, 4, 36, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q/k head dim must be a multiple of 8 in \\[8, 256\\], got 36"):
        fa3.attention(q, q, q)
    wide = torch.zeros(1, 8, 4, 264, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="got 264"):
        fa3.attention(wide, wide, wide)
    # (fa3.compile itself takes only the compiled head dims: test/Python/test_errors.py.)
