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


def attention_grad(q, k, v, do, causal=False, scale=None, window=(-1, -1), softcap=0.0, dlse=None):
    """Returns (dq, dk, dv) in float64: the gradient of `attention`'s output o
    with upstream gradient do (the gradient of sum(o * do) with respect to
    q, k and v), shaped like q, k and v. With `dlse` [B, Hq, Sq], the
    gradient of sum(o * do) + sum(lse * dlse): since dLSE_i/dS_ij = P_ij,
    dS gains P * dLSE (Delta - dLSE in place of Delta below).

    Written independently of `attention`: query heads are grouped as
    [B, Sq, Hkv, G, D] (G = Hq / Hkv) instead of repeating k and v, so that
    the sums over a group's query heads fall out of the einsums. With
    z = scale * q k^T, s = softcap * tanh(z / softcap) (s = z without softcap)
    and P the softmax of s over the visible keys:

        dV    = P^T dO
        dP    = dO V^T
        Delta = rowsum(dO * O)           (= rowsum(P * dP))
        dS    = P * (dP - Delta)         (the softmax Jacobian applied to dP)
        dZ    = dS * (1 - (s / softcap)^2)   (tanh'; the factor is 1 without softcap)
        dQ    = scale * dZ K
        dK    = scale * dZ^T Q

    Masked entries have P = 0 and contribute nothing; rows that see no key
    have a constant o = 0 and get dq = 0; keys that no query sees get
    dk = dv = 0. With Sk = 0, dk and dv are empty and dq is 0.
    """
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    do = np.asarray(do, dtype=np.float64)
    b, sq, hq, d = q.shape
    sk, hkv, dv_dim = k.shape[1], k.shape[2], v.shape[3]
    if hq % hkv:
        raise ValueError(f"query heads {hq} not a multiple of kv heads {hkv}")
    if do.shape != (b, sq, hq, dv_dim):
        raise ValueError(f"do of shape {do.shape}, expected {(b, sq, hq, dv_dim)}")
    if scale is None:
        scale = 1.0 / np.sqrt(d)
    g = hq // hkv
    qg = q.reshape(b, sq, hkv, g, d)
    dog = do.reshape(b, sq, hkv, g, dv_dim)

    z = scale * np.einsum("bqhgd,bkhd->bhgqk", qg, k)  # [B, Hkv, G, Sq, Sk]
    s = softcap * np.tanh(z / softcap) if softcap > 0 else z
    mask = visible(sq, sk, causal, window)  # broadcasts over [B, Hkv, G]
    has_key = mask.any(axis=-1)[:, None]  # [Sq, 1]
    s_vis = np.where(mask, s, -np.inf)
    m = s_vis.max(axis=-1, keepdims=True, initial=-np.inf)
    e = np.exp(s_vis - np.where(has_key, m, 0.0))  # masked: exp(-inf) = 0
    l = e.sum(axis=-1, keepdims=True)
    p = e / np.where(has_key, l, 1.0)  # rows without a key: all 0

    o = np.einsum("bhgqk,bkhd->bqhgd", p, v)
    dv = np.einsum("bhgqk,bqhgd->bkhd", p, dog)
    dp = np.einsum("bqhgd,bkhd->bhgqk", dog, v)
    delta = np.einsum("bqhgd,bqhgd->bhgq", dog, o)[..., None]
    if dlse is not None:
        dlse = np.asarray(dlse, dtype=np.float64)
        if dlse.shape != (b, hq, sq):
            raise ValueError(f"dlse of shape {dlse.shape}, expected {(b, hq, sq)}")
        delta = delta - dlse.reshape(b, hkv, g, sq)[..., None]
    ds = p * (dp - delta)
    if softcap > 0:
        ds = ds * (1.0 - (s / softcap) ** 2)
    dq = scale * np.einsum("bhgqk,bkhd->bqhgd", ds, k).reshape(b, sq, hq, d)
    dk = scale * np.einsum("bhgqk,bqhgd->bkhd", ds, qg)
    return dq, dk, dv


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k=None, **options):
    """The packed-batch attention (fa3.attention_varlen) in float64, as one
    `attention` per sequence: q [Tq, Hq, D], k/v [Tk, Hkv, D]; returns o
    [Tq, Hq, Dv] (0 for rows outside every sequence) and lse [Hq, Tq]
    (-inf there)."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    o = np.zeros(q.shape[:2] + (v.shape[2],))
    lse = np.full((q.shape[1], q.shape[0]), -np.inf)
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1 = cu_seqlens_q[b], cu_seqlens_q[b + 1]
        k0, k1 = cu_seqlens_k[b], cu_seqlens_k[b + 1]
        if seqused_k is not None:
            k1 = k0 + seqused_k[b]
        ob, lb = attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], **options)
        o[q0:q1] = ob[0]
        lse[:, q0:q1] = lb[0]
    return o, lse


def attention_kvcache(q, k_cache, v_cache, cache_seqlens, page_table=None, **options):
    """The KV-cache attention (fa3.attention_kvcache) in float64: batch b of
    q [B, Sq, Hq, D] attends to the first cache_seqlens[b] positions of its
    cache, gathered through `page_table` (position j in page
    page_table[b, j // page_size], slot j % page_size) when given."""
    q = np.asarray(q, dtype=np.float64)
    o = np.zeros(q.shape[:3] + (v_cache.shape[3],))
    lse = np.full((q.shape[0], q.shape[2], q.shape[1]), -np.inf)
    for b in range(q.shape[0]):
        n = int(cache_seqlens[b])
        if page_table is None:
            kb, vb = k_cache[b, :n], v_cache[b, :n]
        else:
            pos = np.arange(n)
            pages = np.asarray(page_table)[b, pos // k_cache.shape[1]]
            kb, vb = k_cache[pages, pos % k_cache.shape[1]], v_cache[pages, pos % k_cache.shape[1]]
        ob, lb = attention(q[b:b + 1], np.asarray(kb, np.float64)[None], np.asarray(vb, np.float64)[None],
                           **options)
        o[b], lse[b] = ob[0], lb[0]
    return o, lse


def attention_varlen_grad(q, k, v, do, cu_seqlens_q, cu_seqlens_k, dlse=None, seqused_k=None, **options):
    """The packed-batch backward in float64, as one `attention_grad` per
    sequence (with `dlse` [Hq, Tq], the LSE's gradient; with `seqused_k`,
    sequence b's first seqused_k[b] keys): returns (dq, dk, dv) shaped like
    q, k and v (0 outside every sequence and for unused keys)."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    do = np.asarray(do, dtype=np.float64)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1 = cu_seqlens_q[b], cu_seqlens_q[b + 1]
        k0, k1 = cu_seqlens_k[b], cu_seqlens_k[b + 1]
        if seqused_k is not None:
            k1 = k0 + seqused_k[b]
        seq_dlse = None if dlse is None else np.asarray(dlse, np.float64)[None, :, q0:q1]
        gq, gk, gv = attention_grad(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], do[None, q0:q1],
                                    dlse=seq_dlse, **options)
        dq[q0:q1], dk[k0:k1], dv[k0:k1] = gq[0], gk[0], gv[0]
    return dq, dk, dv
