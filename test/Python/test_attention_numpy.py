"""fa3.attention on numpy arrays (the CPU pipeline through fa3._fa3) against
the float64 reference, on fresh random inputs.

Bound: the CPU pipeline rounds where the Hopper kernel does (P to the storage
type before P·V, the output to the storage type), so the error is a few
units of the storage type's roundoff u times the output's scale:
|O − ref| <= 8·u·(1 + max|V|) and |LSE − ref| <= 1e-4·(1 + |ref|) (f32
accumulation over at most a few thousand keys). test/Integration/CPU checks
the same pipeline against a per-element bound derived in docs/Testing.md;
this file checks the Python layer (argument passing, dtypes, strides,
options) on top of it, so a looser uniform bound suffices and still fails on
any wrong mask, scale or layout (errors of order max|V|).
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
    return np.random.default_rng(abs(hash(case_id)) % 2**32 ^ seed), seed


def _inputs(rng, b, sq, sk, hq, hkv, d, dv, dtype):
    def draw(shape):
        return rng.standard_normal(shape).astype(np.float32).astype(NP[dtype])
    return draw((b, sq, hq, d)), draw((b, sk, hkv, d)), draw((b, sk, hkv, dv))


CASES = [
    # (b, sq, sk, hq, hkv, d, dv, dtype, options)
    (1, 1, 1, 4, 4, 64, 64, "f32", {}),
    (2, 17, 17, 8, 2, 64, 64, "f16", {"causal": True}),
    (1, 300, 200, 8, 1, 128, 128, "bf16", {"causal": True}),
    (1, 200, 300, 4, 2, 32, 64, "f32", {"window_size": (16, 8)}),
    (2, 128, 130, 4, 4, 64, 64, "f16", {"softcap": 5.0, "softmax_scale": 0.3}),
    (1, 1000, 17, 2, 1, 64, 64, "f32", {"causal": True, "window_size": (4, 0)}),
    (1, 64, 64, 2, 2, 256, 256, "bf16", {}),
    # PackGQA, forced on and off, and by fa3's rule (which packs decode).
    (2, 1, 300, 32, 8, 128, 128, "bf16", {"pack_gqa": True}),
    (2, 1, 300, 32, 8, 128, 128, "bf16", {"pack_gqa": False}),
    (1, 1, 77, 16, 2, 64, 64, "f16", {"causal": True}),
    (1, 100, 130, 16, 4, 64, 64, "f32", {"causal": True, "pack_gqa": True, "window_size": (10, 0)}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c[:8])) + str(c[8]))
def test_attention_numpy_matches_reference(case):
    b, sq, sk, hq, hkv, d, dv, dtype, options = case
    rng, seed = _rng(str(case))
    q, k, v = _inputs(rng, b, sq, sk, hq, hkv, d, dv, dtype)
    out, lse = fa3.attention(q, k, v, return_lse=True, **options)
    assert out.shape == (b, sq, hq, dv) and out.dtype == q.dtype
    assert lse.shape == (b, hq, sq) and lse.dtype == np.float32
    ref_o, ref_lse = reference.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                                         causal=options.get("causal", False), scale=options.get("softmax_scale"),
                                         window=options.get("window_size", (-1, -1)),
                                         softcap=options.get("softcap", 0.0))
    o64 = out.astype(np.float64)
    assert not np.isnan(o64).any()
    bound = 8 * U[dtype] * (1 + np.abs(v.astype(np.float64)).max())
    err = np.abs(o64 - ref_o).max()
    assert err <= bound, f"O error {err:.3g} > {bound:.3g} (FA3_TEST_SEED={seed})"
    seen = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isneginf(lse), ~seen)
    lse_err = np.abs(lse[seen] - ref_lse[seen])
    assert (lse_err <= 1e-4 * (1 + np.abs(ref_lse[seen]))).all(), f"LSE error {lse_err.max():.3g}"


def test_pack_gqa_rule_packs_decode_and_not_long_queries(monkeypatch):
    """pack_gqa=None: fa3's rule (FlashAttention-3's) packs a decode step's
    group into one tile and leaves full query tiles unpacked; the spec that
    is compiled says which."""
    specs = []
    real_get = fa3._jit.get
    monkeypatch.setattr(fa3._jit, "get", lambda spec, *a, **kw: specs.append(spec) or real_get(spec, *a, **kw))
    for sq in (1, 256):
        rng, _ = _rng(f"rule{sq}")
        fa3.attention(*_inputs(rng, 1, sq, 64, 16, 2, 64, 64, "f32"))
    assert [s.pack_gqa for s in specs] == [True, False]
    assert "pack_gqa" in specs[0].forward_mlir() and "pack_gqa" not in specs[1].forward_mlir()


def test_return_value_without_lse():
    rng, _ = _rng("plain")
    q, k, v = _inputs(rng, 1, 5, 7, 2, 2, 64, 64, "f32")
    out = fa3.attention(q, k, v)
    assert isinstance(out, np.ndarray) and out.shape == (1, 5, 2, 64)


@pytest.mark.parametrize("b,sq,sk", [(1, 0, 33), (1, 5, 0), (0, 5, 7)], ids=["no-queries", "no-keys", "no-batch"])
@pytest.mark.parametrize("causal", [False, True])
def test_empty_inputs(b, sq, sk, causal):
    """Zero-sized arrays (numpy gives them arbitrary strides) run: no rows,
    or rows that see no key (O = 0, LSE = -inf, as the reference)."""
    rng, _ = _rng("empty")
    q, k, v = _inputs(rng, b, sq, sk, 4, 2, 64, 64, "f32")
    out, lse = fa3.attention(q, k, v, causal=causal, return_lse=True)
    assert out.shape == (b, sq, 4, 64) and lse.shape == (b, 4, sq)
    ref_o, ref_lse = reference.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                                         causal=causal)
    np.testing.assert_array_equal(out, ref_o)
    np.testing.assert_array_equal(lse, ref_lse)
    if out.size:
        assert (out == 0).all() and np.isneginf(lse).all()


def test_strided_inputs_are_accepted():
    """Only the last dim must be contiguous: a query sliced along the
    sequence and a key/value transposed from (b, h, s, d) run, copied."""
    rng, _ = _rng("strided")
    q_big, k, v = _inputs(rng, 1, 40, 30, 4, 2, 64, 64, "f32")
    q = q_big[:, ::2]  # every other query row: strided in dim 1
    k_bhsd = np.ascontiguousarray(k.transpose(0, 2, 1, 3))
    k_view = k_bhsd.transpose(0, 2, 1, 3)  # (b, s, h, d) view with permuted strides
    assert not q.flags.c_contiguous and not k_view.flags.c_contiguous
    out = fa3.attention(q, k_view, v, causal=True)
    ref, _ = reference.attention(q, k, v, causal=True)
    assert np.abs(out - ref).max() <= 8 * U["f32"] * (1 + np.abs(v).max())


def test_backward_kernel_on_the_cpu_matches_reference():
    """fa3.compile(..., backward=True, device='cpu'): fa3.attention_grad
    through the CPU pipeline, against the float64 analytic gradient. Bound:
    f32 storage, so the error is f32 accumulation over ~S terms scaled by
    the gradient magnitudes (docs/Testing.md derives the per-element bound;
    here 1e-4 relative to the largest entry is ~100x the measured error and
    far below any structural mistake)."""
    rng, seed = _rng("grad")
    b, sq, sk, hq, hkv, d = 1, 70, 90, 4, 2, 32
    q, k, v = _inputs(rng, b, sq, sk, hq, hkv, d, d, "f32")
    do = rng.standard_normal((b, sq, hq, d)).astype(np.float32)
    fwd = fa3.compile("f32", hq, d, num_kv_heads=hkv, causal=True, device="cpu")
    bwd = fa3.compile("f32", hq, d, num_kv_heads=hkv, causal=True, device="cpu", backward=True)
    assert "fa3.attention_grad" in bwd.mlir
    out, lse = fwd(q, k, v)
    dq, dk, dv = bwd(do, q, k, v, out, lse)
    refs = reference.attention_grad(q, k, v, do, causal=True)
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), refs):
        err = np.abs(got - ref).max()
        assert err <= 1e-4 * (1 + np.abs(ref).max()), f"{name} error {err:.3g} (FA3_TEST_SEED={seed})"


def test_fp8_numpy_runs_the_compiler_quantization():
    """fp8=True on numpy arrays: bf16-rounded inputs quantized by
    fa3-cast-fp8 on the CPU. The FP8 error against float64 attention of the
    bf16 inputs is about 1e-2 of |V| (e4m3 has 3 mantissa bits) and
    Hadamard keeps it at that level; a lost descale or Hadamard applied to
    only one of q, k costs errors of order |V|."""
    import ml_dtypes

    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 70, 4, 64), (2, 90, 2, 64), (2, 90, 2, 64)))
    bf = [x.astype(ml_dtypes.bfloat16).astype(np.float64) for x in (q, k, v)]
    want = reference.attention(*bf, causal=True)[0]
    for hadamard in (False, True):
        out, lse = fa3.attention(q, k, v, causal=True, fp8=True, hadamard=hadamard, return_lse=True)
        assert out.dtype == ml_dtypes.bfloat16 and out.shape == (2, 70, 4, 64) and lse.shape == (2, 4, 70)
        err = np.sqrt(np.mean((out.astype(np.float64) - want) ** 2))
        assert err < 3e-2, (hadamard, err)
        assert np.abs(out.astype(np.float64) - want).max() < 0.25
    with pytest.raises(ValueError, match="hadamard=True needs a power-of-two head dim, got 96"):
        fa3.attention(*(np.zeros((1, 4, 2, 96), np.float32) for _ in range(3)), fp8=True, hadamard=True)
