"""Attention dropout through the CPU pipeline (fa3.attention and
fa3.attention_grad with `dropout`, via `fa3.attention` and `fa3.compile`)
against the float64 reference given the same mask, on fresh random inputs.

* The mask, bit for bit: with q = 0 every visible key gets P = 1/Sk, and with
  V the identity (Dv = Sk) each output entry O[i, j] is Z[i, j] / Sk, so
  the output *is* the compiler's mask; it must equal
  `fa3.reference.dropout_mask` (an independent NumPy Philox4x32-10) exactly.
* Its statistics: the kept fraction of ~500k entries lies within 5 binomial
  standard deviations of 1 - p, and the kept entries carry exactly the f32
  scale 1 / (1 - p).
* Forward on random inputs (GQA, causal, Sq != Sk, lengths that are not
  tile multiples) against `reference.attention(..., dropout_mask=M)`.
  Bound per element: u·|O| (the output's rounding) + 2u·(|P∘Z|·|V|)/1 (P∘Z
  rounded to the storage type before P·V, as on the GPU) + 1e-4·(|P∘Z|·|V|)
  (f32 scores, exp2 and sums over at most 1000 keys), u the storage type's
  unit roundoff; the LSE (unaffected by dropout) within 1e-4·(1 + |LSE|).
* Backward (f32, so the bound can be tight): dQ, dK, dV against
  `reference.attention_grad(..., dropout_mask=M)` given the reference O and
  LSE, within 1e-4·(|g| + max|g|) — f32 accumulation over at most a few
  hundred rows and keys gives ~1e-5 relative. The same gradients are far
  (> 100x the bound) from those without the mask, so the test sees the
  mask's use in both dV and dP.
"""

import os

import ml_dtypes
import numpy as np
import pytest

import fa3
from fa3 import reference

U = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}
NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _rng(case_id):
    seed = int(os.environ.get("FA3_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    return np.random.default_rng(abs(hash(case_id)) % 2**32 ^ seed)


def _draw(rng, shape, dtype):
    return rng.standard_normal(shape).astype(np.float32).astype(NP[dtype])


def _mask_of(b, sq, sk, hq, p, seed, offset, causal=False):
    """The compiler's dropout mask times 1/Sk, read off its output: q = 0
    (P = 1/Sk on every key) and V the identity."""
    q = np.zeros((b, sq, hq, 8), np.float32)
    k = np.ones((b, sk, 1, 8), np.float32)
    v = np.broadcast_to(np.eye(sk, dtype=np.float32), (b, 1, sk, sk)).transpose(0, 2, 1, 3).copy()
    out = fa3.attention(q, k, v, causal=causal, dropout_p=p, dropout_seed=seed, dropout_offset=offset)
    return out.transpose(0, 2, 1, 3)  # [B, Hq, Sq, Sk]


@pytest.mark.parametrize("p,seed,offset", [(0.1, 0, 0), (0.5, 2**63 + 12345, 7), (0.9, -1, 2**40 + 3)])
def test_mask_is_bit_exact(p, seed, offset):
    b, sq, sk, hq = 2, 37, 40, 3
    got = _mask_of(b, sq, sk, hq, p, seed, offset)
    want = reference.dropout_mask(seed, offset, b, hq, sq, sk, p) / sk
    want32 = want.astype(np.float32)
    assert got.shape == want.shape
    assert ((got != 0) == (want32 != 0)).all(), (
        f"{int(((got != 0) != (want32 != 0)).sum())} of {got.size} keep decisions differ from the reference")
    # Kept entries: (1 / (1 - p)) in f32 times 1/Sk, then P·V's f32 sum.
    kept = want32 != 0
    assert np.allclose(got[kept], want32[kept], rtol=4 * 2.0**-24 * sk, atol=0)


def test_mask_respects_causal_and_offsets():
    """The mask is in each sequence's own coordinates, and the causal mask
    is applied on top of it (hidden keys stay 0 whatever the dropout)."""
    b, sq, sk, hq, p = 1, 20, 40, 2, 0.3
    got = _mask_of(b, sq, sk, hq, p, 99, 5, causal=True)
    # Causal P is 1 / (visible keys of the row), not 1/Sk: compare supports.
    want = reference.dropout_mask(99, 5, b, hq, sq, sk, p) * reference.visible(sq, sk, causal=True)
    assert ((got != 0) == (want != 0)).all()


def test_keep_rate_and_scale():
    b, sq, sk, hq, p = 2, 256, 256, 4, 0.3
    got = _mask_of(b, sq, sk, hq, p, 2024, 0) * sk
    n = got.size
    kept = got != 0
    rate = kept.mean()
    sigma = np.sqrt(p * (1 - p) / n)
    assert abs(rate - (1 - p)) <= 5 * sigma, f"kept {rate:.5f}, expected {1 - p} ± {5 * sigma:.5f}"
    scale = np.float32(1.0 / (1.0 - float(np.float32(p))))
    assert np.allclose(got[kept], scale, rtol=2.0**-20, atol=0)


def test_different_seeds_offsets_and_heads_differ():
    b, sq, sk, hq, p = 1, 64, 64, 2, 0.5
    a = _mask_of(b, sq, sk, hq, p, 1, 0) != 0
    assert (a == (_mask_of(b, sq, sk, hq, p, 1, 0) != 0)).all(), "the same seed gave another mask"
    for other in (_mask_of(b, sq, sk, hq, p, 2, 0), _mask_of(b, sq, sk, hq, p, 1, 1)):
        differ = (a != (other != 0)).mean()
        assert 0.4 < differ < 0.6, f"{differ:.3f} of the entries differ (expected ~0.5)"
    assert 0.4 < (a[:, 0] != a[:, 1]).mean() < 0.6, "heads share a mask"


FORWARD_CASES = [
    # (b, sq, sk, hq, hkv, d, dtype, causal, p)
    (2, 17, 1000, 4, 2, 64, "bf16", False, 0.1),
    (1, 1000, 17, 2, 1, 32, "f16", True, 0.5),
    (2, 1, 300, 8, 2, 128, "f32", False, 0.2),
    (1, 129, 257, 4, 4, 64, "bf16", True, 0.9),
]


@pytest.mark.parametrize("case", FORWARD_CASES, ids=lambda c: "-".join(map(str, c)))
def test_forward_matches_reference(case):
    b, sq, sk, hq, hkv, d, dtype, causal, p = case
    rng = _rng(str(case))
    q, k, v = (_draw(rng, (b, s, h, d), dtype) for s, h in ((sq, hq), (sk, hkv), (sk, hkv)))
    seed, offset = int(rng.integers(0, 2**63)), int(rng.integers(0, 2**32))
    out, lse = fa3.attention(q, k, v, causal=causal, return_lse=True, dropout_p=p, dropout_seed=seed,
                             dropout_offset=offset)
    mask = reference.dropout_mask(seed, offset, b, hq, sq, sk, p)
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    ref_o, ref_lse = reference.attention(q64, k64, v64, causal=causal, dropout_mask=mask)
    # |P∘Z|·|V| per output entry, for the bound.
    _, plain_lse = reference.attention(q64, k64, v64, causal=causal)
    group = hq // hkv
    kk, vv = np.repeat(k64, group, axis=2), np.repeat(v64, group, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q64, kk) / np.sqrt(d)
    s = np.where(reference.visible(sq, sk, causal), s, -np.inf)
    prob = np.exp(s - np.where(np.isfinite(plain_lse), plain_lse, 0.0)[..., None])
    mag = np.einsum("bhqk,bkhd->bqhd", np.abs(prob * mask), np.abs(vv))
    u = U[dtype]
    bound = u * np.abs(ref_o) + 2 * u * mag + 1e-4 * mag + 1e-6
    err = np.abs(out.astype(np.float64) - ref_o)
    assert (err <= bound).all(), f"O error {err.max():.3g}, worst ratio {(err / bound).max():.3g}"
    assert np.allclose(lse, ref_lse, rtol=1e-4, atol=1e-4, equal_nan=False) or (
        np.isinf(ref_lse) == np.isinf(lse)).all()
    finite = np.isfinite(ref_lse)
    assert (np.abs(lse[finite] - ref_lse[finite]) <= 1e-4 * (1 + np.abs(ref_lse[finite]))).all()


GRAD_CASES = [
    # (b, sq, sk, hq, hkv, d, causal, p)
    (1, 17, 100, 2, 1, 64, False, 0.1),
    (2, 70, 33, 4, 2, 32, True, 0.5),
    (1, 1, 65, 2, 2, 128, False, 0.25),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: "-".join(map(str, c)))
def test_backward_matches_reference(case):
    b, sq, sk, hq, hkv, d, causal, p = case
    rng = _rng(str(case))
    q, k, v, do = (_draw(rng, (b, s, h, d), "f32") for s, h in ((sq, hq), (sk, hkv), (sk, hkv), (sq, hq)))
    seed, offset = int(rng.integers(0, 2**63)), 11
    mask = reference.dropout_mask(seed, offset, b, hq, sq, sk, p)
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))
    o, lse = reference.attention(q64, k64, v64, causal=causal, dropout_mask=mask)
    kernel = fa3.compile("f32", hq, d, num_kv_heads=hkv, causal=causal, device="cpu", backward=True, dropout_p=p)
    rng_words = np.array([seed, offset], dtype=np.int64)
    grads = kernel(do, q, k, v, o.astype(np.float32), lse.astype(np.float32), rng_words)
    refs = reference.attention_grad(q64, k64, v64, do64, causal=causal, dropout_mask=mask)
    plain = reference.attention_grad(q64, k64, v64, do64, causal=causal)
    for name, g, ref, no_mask in zip(("dq", "dk", "dv"), grads, refs, plain):
        bound = 1e-4 * (np.abs(ref) + np.abs(ref).max())
        err = np.abs(g.astype(np.float64) - ref)
        assert (err <= bound).all(), f"{name} error {err.max():.3g}, worst ratio {(err / bound).max():.3g}"
        assert (np.abs(g - no_mask) > 100 * bound).any(), f"{name} does not depend on the mask"


def test_forward_compile_takes_the_seed_last():
    kernel = fa3.compile("f32", 2, 64, device="cpu", dropout_p=0.5)
    assert "rng(%rng)" in kernel.mlir and "dropout = 0.5 : f32" in kernel.mlir
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 9, 2, 64)).astype(np.float32) for _ in range(3))
    seed = np.array([5, 0], dtype=np.int64)
    out, _ = kernel(q, k, v, seed)
    again = fa3.attention(q, k, v, dropout_p=0.5, dropout_seed=5)
    assert (out == again).all()


def test_zero_probability_is_plain_attention():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 9, 2, 64)).astype(np.float32) for _ in range(3))
    assert (fa3.attention(q, k, v, dropout_p=0.0, dropout_seed=3) == fa3.attention(q, k, v)).all()


@pytest.mark.parametrize("kwargs,error,match", [
    ({"dropout_p": 1.0, "dropout_seed": 1}, ValueError, r"dropout_p must be in \[0, 1\)"),
    ({"dropout_p": -0.1, "dropout_seed": 1}, ValueError, r"dropout_p must be in \[0, 1\)"),
    ({"dropout_p": "0.1", "dropout_seed": 1}, TypeError, "dropout_p must be a float"),
    ({"dropout_p": 0.1}, ValueError, "dropout_p > 0 needs dropout_seed"),
    ({"dropout_p": 0.1, "dropout_seed": 2**64}, ValueError, r"dropout_seed must be in \[-9223372036854775808, 2\*\*64\)"),
    ({"dropout_p": 0.1, "dropout_seed": 1.5}, TypeError, "dropout_seed must be an int"),
    ({"dropout_p": 0.1, "dropout_seed": 1, "dropout_offset": -1}, ValueError, r"dropout_offset must be in \[0, 2\*\*64\)"),
    ({"dropout_p": 0.1, "dropout_seed": 1, "pack_gqa": True}, ValueError, "does not combine with fp8, hadamard or pack_gqa"),
])
def test_bad_dropout_arguments(kwargs, error, match):
    x = np.ones((1, 4, 2, 64), np.float32)
    with pytest.raises(error, match=match):
        fa3.attention(x, x, x, **kwargs)
