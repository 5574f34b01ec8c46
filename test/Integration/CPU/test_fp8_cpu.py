"""FP8 (f8E4M3FN inputs with descales) on the CPU: fa3-run rounds float32
.npy inputs to e4m3 (nearest even, saturating at ±448 like the kernels'
`cvt.rn.satfinite`), fa3-tile dequantizes them with their (batch, kv-head)
descales and runs the f32 attention, the output is bf16. The reference is
the float64 attention of the same e4m3 values (ml_dtypes) times the descales.

The output is compared with fp8_model (the same attention with P rounded
to e4m3 per 64-key block, as the kernels round it) under the bound stated
there; |LSE - ref| <= 1e-5 · (1 + |ref|) against the plain float64
attention (P's rounding does not enter the LSE). A wrong descale, a swapped
K/V descale, a wrong GQA head mapping or a wrong e4m3 decode (subnormals and
saturated values are in the inputs) moves O by far more."""

import os
import subprocess
import zlib

import ml_dtypes
import numpy as np
import pytest

from fa3 import reference, schedules

import fp8_model


def _e4m3(x):
    """Round to e4m3 as fa3-run does: nearest even, saturating at ±448."""
    return np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)


CASES = [  # b, sq, sk, hq, hkv, d, attrs
    (2, 100, 130, 8, 2, 128, {"causal": True}),
    (1, 17, 17, 4, 4, 64, {}),
    (1, 1, 300, 2, 1, 256, {"window": (32, 8)}),
    (3, 200, 64, 4, 2, 128, {"causal": True, "softcap": 5.0}),
    # Lazy rescaling (fa3-lazy-rescale): kept maxima, P rounded as e4m3 of
    # P · 2^(8 - τ) relative to them (fp8_model does the same).
    (2, 100, 300, 8, 2, 128, {"causal": True, "rescale_threshold": 4}),
    (1, 64, 1000, 4, 4, 64, {"rescale_threshold": 8}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"b{c[0]}-sq{c[1]}-sk{c[2]}-h{c[3]}x{c[4]}-d{c[5]}-"
                         + "-".join(c[6]) if c[6] else f"b{c[0]}-sq{c[1]}-sk{c[2]}-h{c[3]}x{c[4]}-d{c[5]}")
def test_fp8_cpu_matches_dequantized_reference(case, fa3_run, tmp_path):
    b, sq, sk, hq, hkv, d, attrs = case
    seed = int(os.environ.get("FA3_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()) ^ seed)
    q = rng.standard_normal((b, sq, hq, d)).astype(np.float32) * 8
    k = rng.standard_normal((b, sk, hkv, d)).astype(np.float32) * 8
    v = rng.standard_normal((b, sk, hkv, d)).astype(np.float32) * 8
    # e4m3's edges: values that saturate and subnormals (|x| < 2^-6).
    q.reshape(-1)[:5] = [1000.0, -600.0, 0.004, -0.001, 448.0]
    v.reshape(-1)[:3] = [-1000.0, 0.003, 0.0]
    descales = [rng.uniform(0.005, 0.05, (b, hkv)).astype(np.float32) for _ in range(3)]

    e = "f8E4M3FN"
    qt, kt = f"tensor<?x?x{hq}x{d}x{e}>", f"tensor<?x?x{hkv}x{d}x{e}>"
    ot, lt, dt = f"tensor<?x?x{hq}x{d}xbf16>", f"tensor<?x{hq}x?xf32>", f"tensor<?x{hkv}xf32>"
    a = []
    if attrs.get("causal"):
        a.append("causal")
    if "window" in attrs:
        a.append(f"window = array<i64: {attrs['window'][0]}, {attrs['window'][1]}>")
    if "softcap" in attrs:
        a.append(f"softcap = {attrs['softcap']!r} : f32")
    if "rescale_threshold" in attrs:
        a.append("schedule = " + schedules.schedule(64, 64, consumer_wgs=1, stages=1,
                                                     rescale_threshold=attrs["rescale_threshold"]))
    a = " {" + ", ".join(a) + "}" if a else ""
    src = tmp_path / "fp8.mlir"
    src.write_text(f"func.func @f(%q: {qt}, %k: {kt}, %v: {kt}, %qd: {dt}, %kd: {dt}, %vd: {dt}) -> ({ot}, {lt}) {{\n"
                   f"  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd{a} : ({qt}, {kt}, {kt}, {dt}, {dt}, {dt})"
                   f" -> ({ot}, {lt})\n  return %o, %lse : {ot}, {lt}\n}}\n")
    names = ("q", "k", "v", "qd", "kd", "vd")
    for n, x in zip(names, (q, k, v, *descales)):
        np.save(tmp_path / f"{n}.npy", x)
    for n in ("o", "lse"):
        np.save(tmp_path / f"{n}.npy", np.full((1,), np.nan, np.float32))
    proc = subprocess.run([fa3_run, str(src), "--function=f", "--device=cpu"]
                          + [f"--input=@{tmp_path / n}.npy" for n in names]
                          + [f"--output=@{tmp_path / n}.npy" for n in ("o", "lse")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    o, lse = np.load(tmp_path / "o.npy").astype(np.float64), np.load(tmp_path / "lse.npy")
    assert o.dtype == np.float64 and o.shape == (b, sq, hq, d) and lse.shape == (b, hq, sq)

    group = hq // hkv
    qd, kd, vd = (x.astype(np.float64) for x in descales)
    qq = _e4m3(q) * np.repeat(qd, group, axis=1)[:, None, :, None]
    kk, vv = _e4m3(k) * kd[:, None, :, None], _e4m3(v) * vd[:, None, :, None]
    _, ref_lse = reference.attention(qq, kk, vv, causal=attrs.get("causal", False),
                                     window=attrs.get("window", (-1, -1)), softcap=attrs.get("softcap", 0.0))
    assert not np.isnan(o).any()
    model = dict(causal=attrs.get("causal", False), window=attrs.get("window", (-1, -1)),
                 softcap=attrs.get("softcap", 0.0), rescale_threshold=attrs.get("rescale_threshold", 0))
    q8, k8, v8 = _e4m3(q), _e4m3(k), _e4m3(v)
    ref_o = fp8_model.fp8_attention(q8, k8, v8, qd, kd, vd, **model)
    vmax = np.abs(vv).max()
    fp8_model.check_fp8_output(o, ref_o, vmax, f"FA3_TEST_SEED={seed}")
    seen = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isneginf(lse), ~seen)
    lse_err = np.abs(lse[seen] - ref_lse[seen])
    assert (lse_err <= 1e-5 * (1 + np.abs(ref_lse[seen]))).all(), f"LSE error {lse_err.max():.3g}"
