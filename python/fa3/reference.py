"""Float64 NumPy reference of fa3's attention semantics.

Independent of the compiler: tests compare fa3's results with these. Layout
follows FlashAttention: q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv];
the output is [B, Sq, Hq, Dv] and the natural-log LSE [B, Hq, Sq].

Attention dropout follows FlashAttention-2's `dropout_p`; its keep mask
(`dropout_mask`) is defined bit for bit by a Philox4x32-10 stream
(`philox4x32_10`), so that fa3's kernels, which draw the same bits, can be
compared with this reference exactly rather than statistically.
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


_MASK32 = 0xFFFFFFFF
_PHILOX_M0, _PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
_PHILOX_W0, _PHILOX_W1 = 0x9E3779B9, 0xBB67AE85


def _u32(x):
    """x as uint64 holding its low 32 bits: products of two such values fit
    in uint64 without overflow, so the 32x32 -> 64-bit multiply of a Philox
    round is exact."""
    return np.asarray(x).astype(np.uint64) & np.uint64(_MASK32)


def philox4x32_10(counter, key):
    """Random123's Philox4x32 with 10 rounds, element-wise over NumPy arrays.

    counter = (c0, c1, c2, c3) and key = (k0, k1) are uint32 values or
    arrays (broadcast together); returns the 4 output words as uint32 arrays.
    A counter-based generator: every output is a pure function of its
    counter and key, so a GPU thread can draw the bits of any attention
    element directly, with no state carried between tiles or passes, and
    this reference can reproduce them exactly.

    One round: (hi0, lo0) = M0 * c0 and (hi1, lo1) = M1 * c2 as 64-bit
    products; the new counter is (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0).
    The key is bumped by the Weyl constants (W0, W1) between rounds: the
    first round uses the key as given, 9 bumps in all.
    """
    c0, c1, c2, c3 = (_u32(c) for c in counter)
    k0, k1 = (_u32(k) for k in key)
    m0, m1 = np.uint64(_PHILOX_M0), np.uint64(_PHILOX_M1)
    w0, w1 = np.uint64(_PHILOX_W0), np.uint64(_PHILOX_W1)
    mask, shift = np.uint64(_MASK32), np.uint64(32)
    for rnd in range(10):
        if rnd:
            k0 = (k0 + w0) & mask
            k1 = (k1 + w1) & mask
        p0 = m0 * c0
        p1 = m1 * c2
        hi0, lo0 = p0 >> shift, p0 & mask
        hi1, lo1 = p1 >> shift, p1 & mask
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    c0, c1, c2, c3 = np.broadcast_arrays(c0, c1, c2, c3)
    return tuple(c.astype(np.uint32) for c in (c0, c1, c2, c3))


def dropout_mask(seed, offset, batch, num_heads, seqlen_q, seqlen_k, p):
    """Float64 [batch, num_heads, seqlen_q, seqlen_k] dropout mask: 0 where
    the attention probability is dropped, the keep scale 1 / (1 - p) (rounded
    to float32, as the kernels multiply by it in float32) where it is kept.

    The bits are defined per element (b, h, i, j), i the query row and j the
    key column in the sequence's own coordinates, so that a mask does not
    depend on tiling, on the pass (forward or backward) that draws it, or on
    how much of the sequence is computed (a prefix of a mask is the mask of
    the prefix):

        key     = (seed mod 2^64) as (low 32 bits, high 32 bits)
        counter = (c, r, (b * num_heads + h) mod 2^32, offset mod 2^32)
        r = (i >> 4) * 8 + (i & 7),  c = (j >> 4) * 4 + ((j & 7) >> 1)
        w = philox4x32_10(counter, key)[((i >> 3) & 1) * 2 + ((j >> 3) & 1)]
        x = (w >> (16 * (j & 1))) & 0xffff

so the 2x4 group {i, i + 8} x {j, j + 1, j + 8, j + 9} (i % 16 < 8, j % 16
< 8, j even) shares one Philox call, 16 bits each: a forward GPU thread
holds such a group (rows r, r + 8 and column pairs c, c + 1 and c + 8,
c + 9 of a wgmma accumulator), and in the transposed backward the two
threads that hold keys j and j + 1 split one call. The element is kept iff
x >= min(floor(p32 * 2^16), 2^16 - 1), p32 being p rounded to float32 (the
kernels' dropout probability): the keep probability is p32 rounded down to
a multiple of 2^-16, and the kept entries are scaled by 1 / (1 - p32), so
the expectation is off by less than 2^-16 relative. p = 0 keeps all.

    `seed` is a 64-bit integer in [-2^63, 2^64) (negative values as two's
    complement); `offset` likewise, of which only the low 32 bits are used
    (callers advance it per training step so that steps draw fresh masks).
    """
    seed, offset = int(seed), int(offset)
    for name, value in (("seed", seed), ("offset", offset)):
        if not -(1 << 63) <= value < (1 << 64):
            raise ValueError(f"{name} {value} is not a 64-bit integer")
    p32 = float(np.float32(p))
    if not 0.0 <= p32 < 1.0:
        raise ValueError(f"dropout probability {p} (as float32 {p32}) not in [0, 1)")
    seed %= 1 << 64
    k0, k1 = seed & _MASK32, seed >> 32
    off = offset & _MASK32
    shape = (batch, num_heads, seqlen_q, seqlen_k)
    if 0 in shape:
        return np.zeros(shape)
    threshold = min(int(np.floor(p32 * 2.0**16)), 0xFFFF)
    keep_scale = float(np.float32(1.0 / (1.0 - p32)))

    i = np.arange(seqlen_q)
    j = np.arange(seqlen_k)
    r = (i >> 4) * 8 + (i & 7)
    c = (j >> 4) * 4 + ((j & 7) >> 1)
    word = ((i >> 3) & 1)[:, None] * 2 + ((j >> 3) & 1)[None, :]
    shift = (16 * (j & 1)).astype(np.uint32)[None, None, :]
    # One Philox call per (stream, r, c) group, then each element picks its
    # word and half: 8x fewer calls than one per element.
    stream = np.arange(batch * num_heads, dtype=np.uint64)[:, None, None]
    words = philox4x32_10((np.arange(c.max() + 1, dtype=np.uint64)[None, None, :],
                           np.arange(r.max() + 1, dtype=np.uint64)[None, :, None],
                           stream, off), (k0, k1))
    words = np.stack(words, axis=1)  # [B * H, 4, R, C]
    x = (words[:, word, r[:, None], c[None, :]] >> shift) & np.uint32(0xFFFF)  # [B * H, Sq, Sk]
    keep = x >= np.uint32(threshold)
    return np.where(keep, keep_scale, 0.0).reshape(shape)


def _check_dropout_mask(dropout_mask, b, hq, sq, sk):
    dropout_mask = np.asarray(dropout_mask, dtype=np.float64)
    if dropout_mask.shape != (b, hq, sq, sk):
        raise ValueError(f"dropout_mask of shape {dropout_mask.shape}, expected {(b, hq, sq, sk)}")
    return dropout_mask


def attention(q, k, v, causal=False, scale=None, window=(-1, -1), softcap=0.0, dropout_mask=None):
    """Returns (o, lse) in float64. Rows that see no key get o = 0, lse = -inf.

    With `dropout_mask` [B, Hq, Sq, Sk] (see `dropout_mask`: 0 or the keep
    scale), attention dropout as FlashAttention-2's `dropout_p`: o =
    (P * dropout_mask) V, P being the softmax; lse stays that of the
    undropped softmax (dropout acts after the normalization, and the
    backward rebuilds P from it).
    """
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
    if dropout_mask is not None:
        p = p * _check_dropout_mask(dropout_mask, b, hq, sq, sk)
    o = np.einsum("bhqk,bkhd->bqhd", p, vv)
    lse = np.where(has_key[..., 0], np.log(np.where(has_key, l, 1.0))[..., 0] + m_safe[..., 0], -np.inf)
    return o, lse


def attention_grad(q, k, v, do, causal=False, scale=None, window=(-1, -1), softcap=0.0, dlse=None,
                   dropout_mask=None):
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

    With `dropout_mask` M [B, Hq, Sq, Sk] (0 or the keep scale), O = (P * M) V
    and the chain rule goes through P * M:

        dV    = (P * M)^T dO
        dPd   = (dO V^T) * M             (the gradient of L w.r.t. P)
        Delta = rowsum(dO * O)           (= rowsum(P * dPd), O the dropped output)
        dS    = P * (dPd - Delta)

    and dZ, dQ, dK as above; the LSE is that of the undropped P, so dlse
    enters as without dropout.

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

    pd = p  # the dropped probabilities P * M
    if dropout_mask is not None:
        # Query head hkv * G + g is group (hkv, g), as in qg.
        dmask = _check_dropout_mask(dropout_mask, b, hq, sq, sk).reshape(b, hkv, g, sq, sk)
        pd = p * dmask
    o = np.einsum("bhgqk,bkhd->bqhgd", pd, v)
    dv = np.einsum("bhgqk,bqhgd->bkhd", pd, dog)
    dp = np.einsum("bqhgd,bkhd->bhgqk", dog, v)
    if dropout_mask is not None:
        dp = dp * dmask
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
