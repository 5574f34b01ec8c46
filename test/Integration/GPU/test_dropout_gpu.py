"""Attention dropout on Hopper: `fa3.attention(..., dropout_p=p)` on torch
CUDA tensors, forward and backward, against the float64 reference given the
same mask.

* The mask, bit for bit: with q = 0 every key gets P = 1/Sk, and V one-hot
  on a window of 128 keys (V[j, j - base] = 1) makes O[i, c] = P·Z[i, base
  + c], nonzero exactly where the kernel kept (i, base + c). The kept set
  must equal `fa3.reference.dropout_mask` (NumPy Philox4x32-10, the CPU
  pipeline's mask too) over 1000 query rows, two key windows, heads and
  batches; so the GPU, the CPU and the reference agree.
* Its statistics: the kept fraction within 5 binomial standard deviations
  of 1 - p.
* Forward and backward on fresh random inputs (GQA, causal and not, Sq !=
  Sk, lengths that are not tile multiples, d64/d128/d256) against a
  float64 torch attention with that mask (dV = (P∘Z)ᵀ dO, dS = P∘(Z∘dP −
  Δ)). Bound: max |fa3 − ref| <= 2·s·max |SDPA − ref₀| + 1e-3·max |ref|,
  where SDPA is PyTorch's bf16 attention without dropout on the same
  inputs, ref₀ its float64 reference and s = 1/(1 − p) (dropout scales the
  terms that round by s); i.e. within 2x PyTorch's own bf16 error.
* Same seed → the same bits; another seed or offset → another mask;
  torch.manual_seed reproduces a drawn seed; torch.compile gives the eager
  result; a CUDA graph replays a given seed's mask and draws a new seed,
  and mask, in every replay of a call without one.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fa3
from fa3 import reference


def _mask(seed, offset, b, h, sq, sk, p, device="cuda"):
    return torch.from_numpy(reference.dropout_mask(seed, offset, b, h, sq, sk, p)).to(device)


def _kept_window(b, sq, sk, h, p, seed, offset, base):
    """The kernel's keep decisions for keys [base, base + 128), [B, H, Sq, 128]."""
    q = torch.zeros(b, sq, h, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.ones(b, sk, 1, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.zeros(b, sk, 1, 128, device="cuda", dtype=torch.bfloat16)
    idx = torch.arange(base, base + 128, device="cuda")
    v[:, idx, 0, idx - base] = 1.0
    out = fa3.attention(q, k, v, dropout_p=p, dropout_seed=seed, dropout_offset=offset)
    return (out != 0).permute(0, 2, 1, 3)


@pytest.mark.parametrize("p,seed,offset", [(0.1, 1234, 0), (0.5, -1, 7), (0.85, 2**63 + 5, 2**33 + 1)])
def test_mask_is_the_reference_mask(p, seed, offset):
    b, sq, sk, h = 2, 1000, 1024, 3
    want = _mask(seed, offset, b, h, sq, sk, p) != 0
    for base in (0, 896):
        got = _kept_window(b, sq, sk, h, p, seed, offset, base)
        expect = want[..., base:base + 128]
        assert torch.equal(got, expect), (
            f"keys [{base}, {base + 128}): {int((got != expect).sum())} of {got.numel()} keep decisions differ")


def test_keep_rate():
    b, sq, sk, h, p = 2, 1024, 1024, 4, 0.3
    kept = _kept_window(b, sq, sk, h, p, 99, 0, 0)
    n = kept.numel()
    rate = kept.double().mean().item()
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(rate - (1 - p)) <= 5 * sigma, f"kept {rate:.5f}, expected {1 - p} ± {5 * sigma:.5f}"


def _reference(q, k, v, causal, scale, mask):
    """float64 O of attention with dropout mask `mask` [B, Hq, Sq, Sk]."""
    group = q.shape[2] // k.shape[2]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k.repeat_interleave(group, 2), v.repeat_interleave(group, 2)))
    s = (qt @ kt.transpose(-1, -2)) * scale
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + (sk - sq), float("-inf"))
    prob = torch.softmax(s, dim=-1).nan_to_num(0.0)
    if mask is not None:
        prob = prob * mask
    return (prob @ vt).transpose(1, 2)


def _sdpa(q, k, v, causal, scale):
    group = q.shape[2] // k.shape[2]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k.repeat_interleave(group, 2), v.repeat_interleave(group, 2)))
    sq, sk = q.shape[1], k.shape[1]
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    attn_mask = (j <= i + (sk - sq)) if causal else None
    return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=attn_mask, scale=scale).transpose(1, 2)


def _grads(fn, inputs, do):
    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    out = fn(*leaves)
    (out * do.to(out.dtype)).sum().backward()
    return out.detach(), [x.grad for x in leaves]


CASES = [
    # (b, sq, sk, hq, hkv, d, causal, p)
    (2, 1000, 1000, 4, 2, 128, True, 0.1),
    (1, 17, 1000, 4, 1, 64, False, 0.5),
    (1, 1000, 17, 2, 2, 256, True, 0.2),
    (2, 300, 257, 8, 2, 64, True, 0.3),
    (1, 129, 300, 2, 1, 256, False, 0.1),
    (1, 1, 500, 4, 4, 128, False, 0.5),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_forward_and_backward_match_float64(case):
    b, sq, sk, hq, hkv, d, causal, p = case
    torch.manual_seed(sum(case[:6]))
    q = torch.randn(b, sq, hq, d, device="cuda").bfloat16()
    k = torch.randn(b, sk, hkv, d, device="cuda").bfloat16()
    v = torch.randn(b, sk, hkv, d, device="cuda").bfloat16()
    do = torch.randn(b, sq, hq, d, device="cuda").bfloat16()
    scale = 1.0 / math.sqrt(d)
    seed, offset = 42 + sq, 3
    mask = _mask(seed, offset, b, hq, sq, sk, p)
    q64, k64, v64 = (t.double() for t in (q, k, v))
    ref_o, ref_grads = _grads(lambda *x: _reference(*x, causal, scale, mask), [q64, k64, v64], do)
    ref0_o, ref0_grads = _grads(lambda *x: _reference(*x, causal, scale, None), [q64, k64, v64], do)
    # Causal with Sq > Sk: the first Sq - Sk rows see no key (O = 0, dQ = 0).
    # SDPA's yardstick runs on the rows that see some key (the last ones
    # keep their bottom-right diagonal); its dK and dV are the whole
    # problem's, since the other rows add nothing.
    lo = sq - sk if causal and sq > sk else 0
    sdpa_o, sdpa_grads = _grads(lambda *x: _sdpa(*x, causal, scale), [q[:, lo:], k, v], do[:, lo:])
    fa3_o, fa3_grads = _grads(
        lambda *x: fa3.attention(*x, causal=causal, dropout_p=p, dropout_seed=seed, dropout_offset=offset),
        [q, k, v], do)
    assert (fa3_o[:, :lo] == 0).all() and (fa3_grads[0][:, :lo] == 0).all(), "rows that see no key"
    s = 1.0 / (1.0 - p)
    rows = slice(lo, None)
    for name, got, ours, ref, ref0 in [("O", fa3_o[:, rows], sdpa_o, ref_o[:, rows], ref0_o[:, rows]),
                                       ("dQ", fa3_grads[0][:, rows], sdpa_grads[0], ref_grads[0][:, rows],
                                        ref0_grads[0][:, rows])] + list(
            zip(("dK", "dV"), fa3_grads[1:], sdpa_grads[1:], ref_grads[1:], ref0_grads[1:])):
        assert got.shape == ref.shape and torch.isfinite(got).all(), name
        err = (got.double() - ref).abs().max().item()
        bound = 2 * s * (ours.double() - ref0).abs().max().item() + 1e-3 * ref.abs().max().item()
        assert err <= bound, f"{name}: max error {err:.3e} > bound {bound:.3e}"
        # The test can see the mask: with and without it the references
        # differ by more than the bound.
        assert (ref - ref0).abs().max().item() > 2 * bound, f"{name}: the mask changes less than the bound"


def test_same_seed_same_bits_and_seeds_from_torch():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 300, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    a = fa3.attention(q, k, v, causal=True, dropout_p=0.2, dropout_seed=5)
    assert torch.equal(a, fa3.attention(q, k, v, causal=True, dropout_p=0.2, dropout_seed=5))
    assert not torch.equal(a, fa3.attention(q, k, v, causal=True, dropout_p=0.2, dropout_seed=6))
    assert not torch.equal(a, fa3.attention(q, k, v, causal=True, dropout_p=0.2, dropout_seed=5, dropout_offset=1))
    torch.manual_seed(11)
    drawn = fa3.attention(q, k, v, dropout_p=0.2)
    torch.manual_seed(11)
    assert torch.equal(drawn, fa3.attention(q, k, v, dropout_p=0.2))
    assert not torch.equal(drawn, fa3.attention(q, k, v, dropout_p=0.2))


def test_cpu_and_gpu_masks_agree():
    """The CPU pipeline (numpy, f32) and the kernel keep the same entries."""
    b, sq, sk, h, p, seed = 1, 200, 128, 2, 0.4, 77
    gpu = _kept_window(b, sq, sk, h, p, seed, 0, 0).cpu().numpy()
    qz = np.zeros((b, sq, h, 128), np.float32)
    kz = np.ones((b, sk, 1, 128), np.float32)
    vz = np.broadcast_to(np.eye(128, dtype=np.float32), (b, 1, 128, 128)).transpose(0, 2, 1, 3).copy()
    cpu = fa3.attention(qz, kz, vz, dropout_p=p, dropout_seed=seed).transpose(0, 2, 1, 3) != 0
    assert (gpu == cpu).all()


def test_torch_compile_matches_eager():
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 257, 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))

    # deterministic: dQ's partials from the key-block CTAs then meet in a
    # fixed order; otherwise two backwards may round dQ differently (the
    # order CTAs finish in), and eager and compiled could not match bit for bit.
    def run(a, b, c):
        return fa3.attention(a, b, c, causal=True, dropout_p=0.25, dropout_seed=9, deterministic=True)

    eager = run(q, k, v)
    eager.sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    compiled = torch.compile(run)(q, k, v)
    compiled.sum().backward()
    assert torch.equal(eager, compiled)
    for g, t in zip(grads, (q, k, v)):
        assert torch.equal(g, t.grad)


def test_cuda_graph_replays_a_given_seed_and_redraws_a_drawn_one(capture_cuda_graph):
    """Forward + backward with dropout captured in a CUDA graph. A given
    seed: every replay's output equals the eager call's bit for bit (its
    gradients within dQ's rounding). A drawn seed:
    every replay draws a new one from the device's generator, so the
    masks of two replays differ, each keeping 1 - p of the entries."""
    torch.manual_seed(21)
    q, k, v = (torch.randn(2, 300, 4, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    do = torch.randn_like(q)

    def step():
        for x in (q, k, v):
            x.grad = None
        out = fa3.attention(q, k, v, causal=True, dropout_p=0.3, dropout_seed=17, dropout_offset=4)
        out.backward(do)
        return out

    graph, static = capture_cuda_graph(step)
    grads = (q.grad, k.grad, v.grad)
    for trial in range(2):
        with torch.no_grad():
            for x in (q, k, v, do):
                x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        qe, ke, ve = (x.detach().clone().requires_grad_() for x in (q, k, v))
        eager = fa3.attention(qe, ke, ve, causal=True, dropout_p=0.3, dropout_seed=17, dropout_offset=4)
        eager.backward(do)
        assert torch.equal(static, eager), trial
        # dQ's atomic sums may round differently run to run; a mask that
        # differed would move the gradients by far more.
        for name, g, e in zip(("dq", "dk", "dv"), grads, (qe.grad, ke.grad, ve.grad)):
            tol = 4 * 2**-8 * e.abs().max().item()
            assert (g.float() - e.float()).abs().max().item() <= tol, (trial, name)

    b, sq, sk, h, p = 1, 512, 512, 2, 0.3
    qz = torch.zeros(b, sq, h, 128, device="cuda", dtype=torch.bfloat16)
    kz = torch.ones(b, sk, 1, 128, device="cuda", dtype=torch.bfloat16)
    vz = torch.zeros(b, sk, 1, 128, device="cuda", dtype=torch.bfloat16)
    idx = torch.arange(128, device="cuda")
    vz[:, idx, 0, idx] = 1.0
    graph, static = capture_cuda_graph(lambda: fa3.attention(qz, kz, vz, dropout_p=p))
    masks = []
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        masks.append(static != 0)
    n = masks[0].numel()
    sigma = math.sqrt(p * (1 - p) / n)
    for kept in masks:
        rate = kept.double().mean().item()
        assert abs(rate - (1 - p)) <= 5 * sigma, f"kept {rate:.5f}, expected {1 - p} ± {5 * sigma:.5f}"
    assert not torch.equal(masks[0], masks[1]), "two replays drew the same mask"


def test_dropout_errors_name_the_argument():
    q = torch.zeros(1, 8, 4, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\)"):
        fa3.attention(q, q, q, dropout_p=1.5)
    with pytest.raises(ValueError, match="does not combine with fp8, hadamard or pack_gqa"):
        fa3.attention(q, q, q, dropout_p=0.1, pack_gqa=True)


def test_compiled_kernel_takes_the_rng():
    """fa3.compile(dropout_p=...) kernels launched with an rng (the C API's
    fa3_launch_attention_dropout / _grad_dropout) give fa3.attention's
    bits; a launch without it is an error naming the entry point."""
    torch.manual_seed(5)
    q, k, v, do = (torch.randn(1, 200, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    rng = torch.tensor([77, 2], dtype=torch.int64, device="cuda")
    fwd = fa3.compile("bf16", 4, 128, causal=True, dropout_p=0.3)
    out, lse = fwd(q, k, v, rng)
    want = fa3.attention(q, k, v, causal=True, dropout_p=0.3, dropout_seed=77, dropout_offset=2)
    assert torch.equal(out, want)
    with pytest.raises(fa3.Error, match="fa3_launch_attention_dropout"):
        fwd(q, k, v)
    bwd = fa3.compile("bf16", 4, 128, causal=True, dropout_p=0.3, backward=True)
    dq, dk, dv = bwd(do, q, k, v, out, lse, rng)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = fa3.attention(*leaves, causal=True, dropout_p=0.3, dropout_seed=77, dropout_offset=2)
    ref.backward(do)
    # dK and dV accumulate in registers: the same bits; dQ's f32 atomics
    # may add in another order (one bf16 rounding apart at most).
    assert torch.equal(dk, leaves[1].grad) and torch.equal(dv, leaves[2].grad)
    assert (dq.float() - leaves[0].grad.float()).abs().max() <= 2**-7 * dq.float().abs().max()
