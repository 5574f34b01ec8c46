"""fa3-cast-fp8 on the CPU: fa3.quantize, fa3.hadamard and bf16 attentions
marked `fp8 = #fa3.fp8<...>` run through fa3-run and are checked against
independent NumPy models.

* fa3.quantize is checked bit for bit: its spec (descale = max(amax / 448,
  1e-12) and scale = 1 / descale in float32, then e4m3 of x · scale,
  nearest even, saturating) is reproduced in float32 (fp8_model.quantize).
* fa3.hadamard against x · diag(s) · H / sqrt(D) with H built by Sylvester's
  construction (a dense float64 product, not a butterfly) and s from the
  SplitMix64 rule of the op's documentation: relative error <= 1e-5 (f32
  butterflies: log2(D) roundings of 2^-24 each).
* An attention marked `fp8` gives exactly what the chain fa3-cast-fp8
  should write (hadamard, quantize, FP8 attention, spelled out) gives; that
  chain's quantized inputs are checked against the NumPy quantization, and
  its output against fp8_model (P rounded to e4m3 per 64-key block, as the
  kernels round it) under the bound stated there.
* FlashAttention-3's Table 3 experiment at a CPU-sized shape: RMSE against
  float64 attention of the unquantized inputs, with and without Hadamard.
"""

import os
import zlib

import ml_dtypes
import numpy as np
import pytest

from fa3 import reference

import cast_fp8_case
import fp8_model

SEED = int(os.environ.get("FA3_TEST_SEED", np.random.SeedSequence().entropy % 2**32))


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()) ^ SEED)


def _bf16(x):
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


@pytest.mark.parametrize("elt", ["bf16", "f32"])
def test_quantize_is_bit_exact(elt, fa3_run, tmp_path):
    b, s, h, g, d = 2, 37, 4, 2, 64
    rng = _rng("quantize", elt)
    x = rng.standard_normal((b, s, h, d)).astype(np.float32) * 3
    x[0, 5, 1, 7] = 250.0        # sets group (0, 0)'s amax: most values go subnormal-ish
    x[1, :, 2:, :] = 0.0         # an all-zero group: descale 1e-12, zeros out
    x[1, 0, 0, :4] = [1e-30, -1e-30, 5.0, -5.0]
    if elt == "bf16":
        x = _bf16(x)
    t = f"tensor<?x?x{h}x{d}x{elt}>"
    src = (f"func.func @f(%x: {t}) -> (tensor<?x?x{h}x{d}xf8E4M3FN>, tensor<?x{g}xf32>) {{\n"
           f"  %r, %s = fa3.quantize %x : {t} -> tensor<?x?x{h}x{d}xf8E4M3FN>, tensor<?x{g}xf32>\n"
           f"  return %r, %s : tensor<?x?x{h}x{d}xf8E4M3FN>, tensor<?x{g}xf32>\n}}\n")
    got, descale = cast_fp8_case.run(fa3_run, tmp_path, src, [x], 2)
    want, want_descale = fp8_model.quantize(x, g)
    np.testing.assert_array_equal(descale, want_descale.astype(np.float64))
    np.testing.assert_array_equal(got, want)
    assert np.abs(got).max() == 448.0
    assert (got[1, :, 2:, :] == 0).all() and descale[1, 1] == np.float32(1e-12)
    # Subnormal codes (|q| < 2^-6) were produced and matched.
    assert ((np.abs(want) > 0) & (np.abs(want) < 2.0 ** -6)).any()


@pytest.mark.parametrize("d,seed,elt", [(16, 0, "f32"), (64, 3, "bf16"), (128, -5, "f32"), (256, 1234567, "bf16")])
def test_hadamard_matches_dense_product(d, seed, elt, fa3_run, tmp_path):
    b, s, h = 2, 9, 3
    x = _rng("hadamard", d).standard_normal((b, s, h, d)).astype(np.float32)
    if elt == "bf16":
        x = _bf16(x)
    t = f"tensor<?x?x{h}x{d}x{elt}>"
    ft = f"tensor<?x?x{h}x{d}xf32>"
    src = (f"func.func @f(%x: {t}) -> {ft} {{\n"
           f"  %y = fa3.hadamard %x {{seed = {seed} : i64}} : {t} -> {ft}\n"
           f"  return %y : {ft}\n}}\n")
    (got,) = cast_fp8_case.run(fa3_run, tmp_path, src, [x], 1)
    m = fp8_model.hadamard_matrix(d, seed)
    want = x.astype(np.float64) @ m
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(x).max() * np.sqrt(d))
    # Orthogonal: norms are kept.
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)


@pytest.mark.parametrize("hadamard", [False, True])
@pytest.mark.parametrize("case", [(2, 100, 130, 4, 2, 64, True), (1, 17, 300, 2, 1, 128, False),
                                  (1, 1000, 1000, 2, 1, 64, True)],
                         ids=lambda c: f"b{c[0]}-sq{c[1]}-sk{c[2]}-h{c[3]}x{c[4]}-d{c[5]}" + ("-causal" if c[6] else ""))
def test_fp8_attribute_matches_model(case, hadamard, fa3_run, tmp_path):
    b, sq, sk, hq, hkv, d, causal = case
    rng = _rng("attention", case, hadamard)
    q, k, v = (_bf16(rng.standard_normal(shape) * 2) for shape in
               ((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d)))
    seed = 11
    o, lse, q8, k8, v8, qd, kd, vd = cast_fp8_case.run_attribute_and_chain(
        fa3_run, tmp_path, q, k, v, causal, hadamard, seed, device="cpu")

    vmax = float(np.abs(v8 * vd[:, None, :, None]).max())
    want = fp8_model.fp8_attention(q8, k8, v8, qd, kd, vd, causal=causal)
    fp8_model.check_fp8_output(o, want, vmax, f"FA3_TEST_SEED={SEED}")
    # The P rounding is visible at the tight bound: without it the model is off.
    unrounded = fp8_model.fp8_attention(q8, k8, v8, qd, kd, vd, causal=causal, round_p=False)
    fraction, _ = fp8_model.within_bound(o, unrounded, vmax)
    assert fraction < 0.9, fraction
    # The LSE is that of the dequantized inputs (P's rounding does not enter it).
    group = hq // hkv
    _, want_lse = reference.attention(q8 * np.repeat(qd, group, axis=1)[:, None, :, None],
                                      k8 * kd[:, None, :, None], v8 * vd[:, None, :, None], causal=causal)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)


def test_table3_rmse_on_cpu(fa3_run, tmp_path):
    """FA3 Table 3's inputs, N(0,1) + N(0,100)·Bernoulli(0.001), at a shape
    the CPU runs in seconds: Hadamard must cut the FP8 RMSE against float64
    attention of the unquantized inputs. The issue's targets (1.0e-2 with,
    2.6e-2 without) are for the paper's shape, which test_fp8_gpu.py and
    test_cast_fp8_gpu.py run on the H200. Here (~260 outliers per tensor)
    the RMSE is a statistic of the draw with a heavy tail: fp8_model's
    pipeline over 300 draws gave, with Hadamard, mean 8.7e-3, sd 1.0e-3,
    largest 1.25e-2 (one CI run saw 1.28e-2 against a 1.25e-2 bound);
    without, mean 1.29e-2, largest 1.78e-2; the ratio with/without at most
    0.81. The bounds are 1.6e-2 with (mean + 7 sd) and 2.6e-2 without, and
    Hadamard must help on every draw."""
    b, s, h, d = 1, 512, 4, 128
    rng = _rng("table3")

    def sample(shape):
        return _bf16(rng.standard_normal(shape) + rng.standard_normal(shape) * 10 * (rng.random(shape) < 0.001))

    q, k, v = sample((b, s, h, d)), sample((b, s, h, d)), sample((b, s, h, d))
    want = reference.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))[0]
    rmse = {}
    for hadamard in (False, True):
        attrs = f"fp8 = #fa3.fp8<hadamard = {str(hadamard).lower()}>"
        o, _ = cast_fp8_case.run(fa3_run, tmp_path, cast_fp8_case.attention_src(h, h, d, attrs), [q, k, v], 2)
        rmse[hadamard] = float(np.sqrt(np.mean((o - want) ** 2)))
    print(f"table3 cpu rmse: without hadamard {rmse[False]:.3e}, with {rmse[True]:.3e}")
    assert rmse[True] < rmse[False], rmse
    assert rmse[False] <= 2.6e-2 and rmse[True] <= 1.6e-2, rmse
