"""Float64 NumPy reference of fa3's attention semantics.

Independent of the compiler: tests compare fa3's results with these. Layout
follows FlashAttention: q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv];
the output is [B, Sq, Hq, Dv] and the natural-log LSE [B, Hq, Sq].
"""

import numpy as np


def visible(sq, sk, causal=False, window=(-1, -1)):
    """Boolean [sq, sk] mask: query i sees key j.

    The diagonal of row i is column i + sk - sq (bottom-right aligned);
    window (left, right) bounds j to [diag - left, diag + right], -1 meaning
    unbounded; causal sets right to 0.
    """
    left, right = window
    if causal:
        right = 0
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    diag = i + sk - sq
    ok = np.ones((sq, sk), dtype=bool)
    if right >= 0:
        ok &= j <= diag + right
    if left >= 0:
        ok &= j >= diag - left
    return ok


def attention(q, k, v, causal=False, scale=None, window=(-1, -1), softcap=0.0):
    """Returns (o, lse) in float64. Rows that see no key get o = 0, lse = -inf."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    if hq % hkv:
        raise ValueError(f"query heads {hq} not a multiple of kv heads {hkv}")
    if scale is None:
        scale = 1.0 / np.sqrt(d)
    group = hq // hkv
    kk = np.repeat(k, group, axis=2)
    vv = np.repeat(v, group, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    mask = visible(sq, sk, causal, window)
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if sk > 0 else np.full((b, hq, sq, 1), -np.inf)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe)
    l = p.sum(axis=-1, keepdims=True)
    has_key = l > 0
    p = np.where(has_key, p / np.where(has_key, l, 1.0), 0.0)
    o = np.einsum("bhqk,bkhd->bqhd", p, vv)
    lse = np.where(has_key[..., 0], np.log(np.where(has_key, l, 1.0))[..., 0] + m_safe[..., 0], -np.inf)
    return o, lse
