"""A float64 model of fa3's FP8 attention as the kernels compute it, for the
FP8 tests (CPU here, H200 in test/Integration/GPU).

The inputs are the e4m3 values and their (batch, kv-head) descales. Keys
are taken in blocks of `block_n` (64 on the CPU, 128 on Hopper) with an
online softmax, and each block's P, relative to the running row max, is
rounded to e4m3 after multiplying by 2^8 (FlashAttention-3's P scaling)
before P·V; the row sums use the unrounded P, as the kernels do.

`check_fp8_output` states the bound. Float32 (kernel) against float64
(model) arithmetic puts a rare P, Q·K̂ value or descale product on the other
side of an e4m3 rounding tie; one such flip moves an output by up to
2^-3 · p/l · |V|. So nearly every element (99.5%) must be within
2^-8 |ref| (the bf16 output) + 2e-4 · max|V|, and all within 2^-4 · max|V|
(the largest effect of P's rounding). A model without P's rounding fails
the first criterion at the sizes the tests use (they check that too).
"""

import numpy as np

from fa3 import reference

try:  # ml_dtypes on the CPU machines, torch's e4m3 on the GPU machine
    import ml_dtypes

    def _to_e4m3(x32):
        return x32.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
except ImportError:
    import torch

    def _to_e4m3(x32):
        return torch.from_numpy(x32).to(torch.float8_e4m3fn).double().numpy()


def e4m3(x):
    """float -> nearest e4m3 value (float64): nearest even, saturating at ±448."""
    return _to_e4m3(np.clip(np.asarray(x, np.float32), -448, 448))


def fp8_attention(q8, k8, v8, qd, kd, vd, causal=False, window=(-1, -1), softcap=0.0,
                  block_n=64, round_p=True):
    b, sq, hq, d = q8.shape
    sk, hkv = k8.shape[1], k8.shape[2]
    group = hq // hkv
    scale = 1.0 / np.sqrt(d)
    mask = reference.visible(sq, sk, causal=causal, window=window)
    out = np.zeros((b, sq, hq, v8.shape[3]))
    for bi in range(b):
        for h in range(hq):
            kh = h // group
            s = (q8[bi, :, h] * qd[bi, kh]) @ (k8[bi, :, kh] * kd[bi, kh]).T * scale
            if softcap:
                s = softcap * np.tanh(s / softcap)
            s = np.where(mask, s, -np.inf)
            vv = v8[bi, :, kh] * vd[bi, kh]
            m = np.full(sq, -np.inf)
            l = np.zeros(sq)
            acc = np.zeros((sq, vv.shape[1]))
            for k0 in range(0, sk, block_n):
                sb = s[:, k0:k0 + block_n]
                m_new = np.maximum(m, sb.max(axis=1))
                m_safe = np.where(np.isinf(m_new), 0.0, m_new)
                p = np.exp(sb - m_safe[:, None])
                alpha = np.exp(m - m_safe)
                l = l * alpha + p.sum(axis=1)
                if round_p:
                    p = e4m3(p * 256) / 256
                acc = acc * alpha[:, None] + p @ vv[k0:k0 + block_n]
                m = m_new
            out[bi, :, h] = acc / np.where(l > 0, l, 1)[:, None]
    return out


def within_bound(o, ref, vmax):
    """The fraction of elements within the tight bound, and the largest error."""
    err = np.abs(o - ref)
    return float(np.mean(err <= 2.0 ** -8 * np.abs(ref) + 2e-4 * vmax)), float(err.max())


def check_fp8_output(o, ref, vmax, what=""):
    fraction, worst = within_bound(o, ref, vmax)
    assert fraction >= 0.995, f"{what}: only {fraction:.4f} of O within the tight bound (worst {worst:.3g})"
    assert worst <= 2.0 ** -4 * vmax, f"{what}: O error {worst:.3g} > 2^-4 max|V| = {2.0 ** -4 * vmax:.3g}"
