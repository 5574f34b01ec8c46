"""Quantizing bf16/f16 attention inputs to e4m3 for fa3's FP8 kernels, with
optional incoherent processing (FlashAttention-3, section 3.3): q and k are
multiplied by the same random-sign Hadamard matrix M = H·diag(s)/sqrt(d),
which is orthogonal, so (qM)(kM)ᵀ = q kᵀ while outliers in q and k are
spread over all d coordinates before the cast. Descales are per (batch, kv
head), amax / 448 (e4m3's largest finite value), FA3's convention."""

import functools
import math

import torch

E4M3_MAX = 448.0


def hadamard_signs(d, seed=0):
    """The signs s_i of fa3.hadamard (see its documentation): bit 63 of
    SplitMix64 of seed + (i + 1) * 0x9E3779B97F4A7C15, -1 when set. The same
    rule as the compiler's, so this path and fa3-cast-fp8 agree."""
    mask = (1 << 64) - 1
    signs = []
    for i in range(d):
        z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        signs.append(-1.0 if z >> 63 else 1.0)
    return signs


@functools.lru_cache(maxsize=None)
def _signs(d, device):
    return torch.tensor(hadamard_signs(d), dtype=torch.float32, device=device)


def hadamard_transform(x):
    """x · diag(s)·H / sqrt(d) over the last dim (a power of two), in float32:
    the fast Walsh–Hadamard transform, log2(d) butterfly passes."""
    d = x.shape[-1]
    if d & (d - 1):
        raise ValueError(f"hadamard=True needs a power-of-two head dim, got {d}")
    y = (x.float() * _signs(d, x.device)).reshape(-1, d)
    h = 1
    while h < d:
        y = y.view(-1, d // (2 * h), 2, h)
        y = torch.stack((y[:, :, 0] + y[:, :, 1], y[:, :, 0] - y[:, :, 1]), dim=2)
        h *= 2
    return y.reshape(x.shape) / math.sqrt(d)


def _quantize(x, kv_heads):
    b, s, h, d = x.shape
    amax = x.float().view(b, s, kv_heads, h // kv_heads, d).abs().amax(dim=(1, 3, 4))
    descale = (amax / E4M3_MAX).clamp(min=1e-12)
    scale = (1.0 / descale).repeat_interleave(h // kv_heads, dim=1)[:, None, :, None]
    return (x.float() * scale).to(torch.float8_e4m3fn), descale.contiguous()


def quantize_for_fp8(q, k, v, hadamard):
    """(q8, k8, v8, (q_descale, k_descale, v_descale)) for fa3's FP8 kernels."""
    if q.requires_grad or k.requires_grad or v.requires_grad:
        if torch.is_grad_enabled():
            raise ValueError("fp8=True is forward-only (the FP8 kernels have no backward); "
                             "call it under torch.no_grad() or on tensors that do not require grad")
    kv_heads = k.shape[2]
    if hadamard:
        q, k = hadamard_transform(q), hadamard_transform(k)
    (q8, qd), (k8, kd), (v8, vd) = (_quantize(x, kv_heads) for x in (q, k, v))
    return q8, k8, v8, (qd, kd, vd)
