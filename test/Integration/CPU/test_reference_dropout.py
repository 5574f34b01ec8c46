"""reference.philox4x32_10, reference.dropout_mask and the dropout_mask
argument of reference.attention / attention_grad (no fa3-run needed).

The kernels draw the very bits that dropout_mask defines, so the mask is
checked exactly where it can be (Random123's known-answer vectors, a scalar
transcription of the per-element definition, the seed/offset wrap-around)
and statistically where it is meant to look random: the keep rate, the
difference between masks of different streams, and the independence of the
16-bit halves of the 4 words of one Philox call, which serve the 2x4 group
{i, i+8} x {j, j+1, j+8, j+9}.
The statistical bounds are 5 binomial standard deviations (a false failure
about once in 3.5 million runs; the inputs are fixed, so in practice never),
while a wrong threshold, a repeated word or a stream that ignores its
argument moves the statistic by tens to hundreds of standard deviations.

The gradient with a mask is compared with central finite differences of
L = sum(O * dO) as in test_reference_grad.py (same step and tolerance, same
error argument): the mask is a constant of L, so the backward's dPd = dP * M
and Delta = rowsum(dO * O_dropped) must reproduce it.
"""

import zlib

import numpy as np
import pytest

from fa3 import reference

H = 1e-6
RTOL = 1e-6
SIGMAS = 5.0

# Random123 kat_vectors, philox4x32 with 10 rounds: (counter, key, output).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter, key, expected", KAT, ids=["zeros", "ones", "pi"])
def test_philox_known_answers(counter, key, expected):
    out = reference.philox4x32_10(counter, key)
    assert all(w.dtype == np.uint32 for w in out)
    assert tuple(int(w) for w in out) == expected, [hex(int(w)) for w in out]


def test_philox_vectorised_matches_scalar_calls():
    rng = np.random.default_rng(1)
    counters = rng.integers(0, 1 << 32, size=(4, 50), dtype=np.uint64).astype(np.uint32)
    key = (0xDEADBEEF, 0x12345678)
    words = reference.philox4x32_10(tuple(counters), key)
    for n in range(50):
        single = reference.philox4x32_10(tuple(int(c) for c in counters[:, n]), key)
        assert tuple(int(w[n]) for w in words) == tuple(int(w) for w in single)
    # Broadcasting: a row of counters against a column.
    a = np.arange(3, dtype=np.uint32)[:, None]
    b = np.arange(5, dtype=np.uint32)[None, :]
    words = reference.philox4x32_10((a, b, 7, 9), key)
    assert words[0].shape == (3, 5)
    assert int(words[2][2, 4]) == int(reference.philox4x32_10((2, 4, 7, 9), key)[2])


def _scalar_mask_entry(seed, offset, num_heads, b, h, i, j, p):
    """The element's value transcribed literally from the definition, one
    scalar Philox call at a time."""
    seed %= 1 << 64
    key = (seed & 0xFFFFFFFF, seed >> 32)
    r = (i >> 4) * 8 + (i & 7)
    c = (j >> 4) * 4 + ((j & 7) >> 1)
    w = ((i >> 3) & 1) * 2 + ((j >> 3) & 1)
    counter = (c, r, (b * num_heads + h) % (1 << 32), offset % (1 << 32))
    x = (int(reference.philox4x32_10(counter, key)[w]) >> (16 * (j & 1))) & 0xFFFF
    p32 = float(np.float32(p))
    threshold = min(int(np.floor(p32 * 2.0**16)), (1 << 16) - 1)
    return float(np.float32(1.0 / (1.0 - p32))) if x >= threshold else 0.0


@pytest.mark.parametrize("seed, offset, shape, p", [
    (0, 0, (1, 1, 16, 16), 0.5),
    (12345, 7, (2, 3, 37, 21), 0.3),
    (-1, (1 << 64) - 1, (1, 2, 24, 40), 0.1),
    ((1 << 63) + 5, 1 << 40, (3, 1, 9, 50), 0.8),
])
def test_mask_matches_elementwise_definition(seed, offset, shape, p):
    mask = reference.dropout_mask(seed, offset, *shape, p)
    assert mask.shape == shape and mask.dtype == np.float64
    rng = np.random.default_rng(zlib.crc32(repr((seed, offset, shape)).encode()))
    positions = [tuple(int(rng.integers(n)) for n in shape) for _ in range(150)]
    # Every half-word of a group: the eight entries of the first 2x4 group.
    positions += [(0, 0, i, j) for i in (0, 8) for j in (0, 1, 8, 9) if i < shape[2] and j < shape[3]]
    for b, h, i, j in positions:
        assert mask[b, h, i, j] == _scalar_mask_entry(seed, offset, shape[1], b, h, i, j, p), (b, h, i, j)


def test_threshold_boundary_keeps_equal_half_word():
    # keep iff x >= threshold: with p = x / 2^16 (exact in float32) the
    # threshold is x itself. The low half of word 0 of the call (c, r) serves
    # element i = (r >> 3) * 16 + (r & 7), j = (c >> 2) * 16 + (c & 3) * 2.
    seed = 424242
    key = (seed & 0xFFFFFFFF, seed >> 32)
    x = int(reference.philox4x32_10((5, 9, 0, 0), key)[0]) & 0xFFFF
    r, c = 9, 5
    i, j = (r >> 3) * 16 + (r & 7), (c >> 2) * 16 + (c & 3) * 2
    p = x / 2.0**16
    assert float(np.float32(p)) == p
    assert reference.dropout_mask(seed, 0, 1, 1, 64, 64, p)[0, 0, i, j] != 0
    # One step of the threshold (2^-16) higher drops it.
    assert reference.dropout_mask(seed, 0, 1, 1, 64, 64, (x + 1) / 2.0**16)[0, 0, i, j] == 0


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_and_scale(p):
    shape = (2, 2, 512, 512)  # 1,048,576 elements
    mask = reference.dropout_mask(2024, 3, *shape, p)
    n = mask.size
    scale = float(np.float32(1.0 / (1.0 - float(np.float32(p)))))
    kept = mask != 0
    assert np.all(mask[kept] == scale)
    rate = kept.mean()
    sigma = np.sqrt(p * (1 - p) / n)
    assert abs(rate - (1 - p)) <= SIGMAS * sigma, f"kept {rate:.5f}, expected {1 - p} ± {SIGMAS * sigma:.5f}"


def test_zero_probability_keeps_everything():
    mask = reference.dropout_mask(99, 5, 2, 3, 33, 47, 0.0)
    assert mask.shape == (2, 3, 33, 47) and np.all(mask == 1.0)


def test_empty_and_invalid():
    assert reference.dropout_mask(1, 0, 1, 2, 0, 5, 0.5).shape == (1, 2, 0, 5)
    assert reference.dropout_mask(1, 0, 1, 2, 5, 0, 0.5).shape == (1, 2, 5, 0)
    for p in (1.0, -0.1, 1.0 - 1e-9):  # the last rounds to 1.0 in float32
        with pytest.raises(ValueError):
            reference.dropout_mask(1, 0, 1, 1, 4, 4, p)
    for seed in (1 << 64, -(1 << 63) - 1):
        with pytest.raises(ValueError):
            reference.dropout_mask(seed, 0, 1, 1, 4, 4, 0.5)


def test_seed_and_offset_wrap_around():
    args = (1, 2, 20, 30, 0.5)
    # Negative seeds are their 64-bit two's complement; only the low 32
    # bits of the offset are used.
    assert np.array_equal(reference.dropout_mask(-1, 3, *args), reference.dropout_mask((1 << 64) - 1, 3, *args))
    assert np.array_equal(reference.dropout_mask(-5, 3, *args), reference.dropout_mask((1 << 64) - 5, 3, *args))
    assert np.array_equal(reference.dropout_mask(8, 3, *args), reference.dropout_mask(8, 3 + (5 << 32), *args))
    # Both halves of the seed matter.
    base = reference.dropout_mask(8, 3, *args)
    assert not np.array_equal(base, reference.dropout_mask(8 + (1 << 32), 3, *args))
    assert not np.array_equal(base, reference.dropout_mask(9, 3, *args))


def test_prefix_of_a_mask_is_the_mask_of_the_prefix():
    # Elements are addressed in the sequence's own coordinates: a shorter
    # sequence (or a tile of a longer one) sees the same bits.
    big = reference.dropout_mask(77, 11, 2, 3, 50, 70, 0.4)
    for sq, sk in ((5, 7), (16, 16), (24, 40), (50, 9)):
        small = reference.dropout_mask(77, 11, 2, 3, sq, sk, 0.4)
        assert np.array_equal(small, big[:, :, :sq, :sk]), (sq, sk)


def _assert_differ_fraction(a, b, p, what):
    n = a.size
    frac = np.mean((a != 0) != (b != 0))
    expected = 2 * p * (1 - p)
    sigma = np.sqrt(expected * (1 - expected) / n)
    assert abs(frac - expected) <= SIGMAS * sigma, f"{what}: {frac:.5f} differ, expected {expected:.5f}"


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_masks_differ_across_seeds_offsets_heads_batches(p):
    shape = (2, 2, 256, 256)
    mask = reference.dropout_mask(5, 100, *shape, p)
    assert np.array_equal(mask, reference.dropout_mask(5, 100, *shape, p))
    _assert_differ_fraction(mask, reference.dropout_mask(6, 100, *shape, p), p, "seed")
    _assert_differ_fraction(mask, reference.dropout_mask(5, 101, *shape, p), p, "offset")
    _assert_differ_fraction(mask[:, 0], mask[:, 1], p, "heads")
    _assert_differ_fraction(mask[0], mask[1], p, "batches")
    # Stream (b, h) = b * num_heads + h: batch 1 head 0 of a 2-head mask is
    # stream 2, not batch 0 head 1's stream 1.
    _assert_differ_fraction(mask[1, 0], mask[0, 1], p, "batch 1 head 0 vs batch 0 head 1")


def test_words_of_one_philox_call_are_independent():
    # The 2x4 group {i, i+8} x {j, j+1, j+8, j+9} (i % 16 < 8, j % 16 < 8, j
    # even) takes the 16-bit halves of the 4 words of one call: their keep
    # decisions must be uncorrelated.
    p = 0.5
    keep = reference.dropout_mask(31337, 0, 2, 2, 512, 512, p) != 0
    # [b, h, i//16, (i>>3)&1, i&7, j//16, (j>>3)&1, (j&7)>>1, j&1]
    blocks = keep.reshape(2, 2, 32, 2, 8, 32, 2, 4, 2)
    entry = {(a, c, e): blocks[:, :, :, a, :, :, c, :, e].ravel().astype(np.float64)
             for a in (0, 1) for c in (0, 1) for e in (0, 1)}
    n = entry[0, 0, 0].size  # 131,072 groups
    pairs = [((0, 0, 0), other) for other in entry if other != (0, 0, 0)] + [((1, 0, 1), (0, 1, 0))]
    for a, b in pairs:
        corr = np.corrcoef(entry[a], entry[b])[0, 1]
        # 1 / sqrt(n) ~ 0.003 is one standard deviation of the correlation.
        assert abs(corr) < 0.015, f"entries {a} and {b}: correlation {corr:.4f} over {n} groups"
    # The raw words are not equal either (equal words would give equal bits).
    words = reference.philox4x32_10((np.arange(4096, dtype=np.uint32), 1, 2, 3), (4, 5))
    for x in range(4):
        for y in range(x + 1, 4):
            assert np.mean(words[x] == words[y]) < 1e-2


def _inputs(b, sq, sk, hq, hkv, d, dv, tag):
    rng = np.random.default_rng(zlib.crc32(tag.encode()))
    q = rng.standard_normal((b, sq, hq, d))
    k = rng.standard_normal((b, sk, hkv, d))
    v = rng.standard_normal((b, sk, hkv, dv))
    do = rng.standard_normal((b, sq, hq, dv))
    return q, k, v, do


def test_attention_with_p0_mask_equals_without():
    q, k, v, do = _inputs(2, 5, 7, 4, 2, 4, 3, "p0")
    mask = reference.dropout_mask(1, 2, 2, 4, 5, 7, 0.0)
    for kw in ({}, {"causal": True}, {"softcap": 1.5, "window": (2, 1)}):
        o, lse = reference.attention(q, k, v, **kw)
        om, lsem = reference.attention(q, k, v, dropout_mask=mask, **kw)
        assert np.array_equal(o, om) and np.array_equal(lse, lsem)
        grads = reference.attention_grad(q, k, v, do, **kw)
        gradsm = reference.attention_grad(q, k, v, do, dropout_mask=mask, **kw)
        assert all(np.array_equal(x, y) for x, y in zip(grads, gradsm))


def test_attention_with_mask_drops_normalized_probabilities():
    # O = (P * M) V with P the undropped softmax, recomputed here from the
    # (unchanged) LSE: P = exp(S - LSE).
    b, sq, sk, hq, hkv, d = 2, 6, 9, 4, 2, 4
    q, k, v, _ = _inputs(b, sq, sk, hq, hkv, d, 3, "forward")
    mask = reference.dropout_mask(3, 4, b, hq, sq, sk, 0.3)
    o, lse = reference.attention(q, k, v, causal=True)
    om, lsem = reference.attention(q, k, v, causal=True, dropout_mask=mask)
    assert np.array_equal(lse, lsem)
    kk = np.repeat(k, hq // hkv, axis=2)
    vv = np.repeat(v, hq // hkv, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, kk) / np.sqrt(d)
    s = np.where(reference.visible(sq, sk, causal=True), s, -np.inf)
    p = np.exp(s - np.where(np.isfinite(lse), lse, 0.0)[..., None])
    expected = np.einsum("bhqk,bkhd->bqhd", p * mask, vv)
    assert np.allclose(om, expected, rtol=1e-12, atol=1e-12)
    assert np.abs(om - o).max() > 1e-2
    with pytest.raises(ValueError):
        reference.attention(q, k, v, dropout_mask=mask[:, :, :, :-1])
    with pytest.raises(ValueError):
        reference.attention_grad(q, k, v, np.zeros_like(o), dropout_mask=mask[:, :2])


def _loss(q, k, v, do, dlse, kw):
    o, lse = reference.attention(q, k, v, **kw)
    loss = np.sum(o * do)
    if dlse is not None:
        loss += np.sum(np.where(np.isfinite(lse), lse * dlse, 0.0))
    return float(loss)


# (b, sq, sk, hq, hkv, d, dv, kwargs, with dlse)
GRAD_CASES = [
    (1, 5, 7, 2, 1, 4, 4, {}, False),
    (1, 5, 7, 2, 1, 4, 4, {"causal": True}, False),
    (2, 5, 7, 4, 2, 4, 3, {"softcap": 1.5}, False),
    (1, 7, 5, 4, 2, 4, 3, {"causal": True, "scale": 0.7}, True),
]


def _grad_id(case):
    b, sq, sk, hq, hkv, d, dv, kw, with_dlse = case
    extra = "-".join(f"{k}{v}" for k, v in kw.items()).replace(" ", "")
    return f"b{b}-sq{sq}-sk{sk}-h{hq}x{hkv}-d{d}-dv{dv}" + (f"-{extra}" if extra else "") + ("-dlse" if with_dlse else "")


@pytest.mark.parametrize("case", GRAD_CASES, ids=[_grad_id(c) for c in GRAD_CASES])
def test_grad_with_mask_matches_finite_differences(case):
    b, sq, sk, hq, hkv, d, dv, kw, with_dlse = case
    q, k, v, do = _inputs(b, sq, sk, hq, hkv, d, dv, _grad_id(case))
    dlse = np.random.default_rng(5).standard_normal((b, hq, sq)) if with_dlse else None
    mask = reference.dropout_mask(zlib.crc32(_grad_id(case).encode()), 1, b, hq, sq, sk, 0.4)
    assert (mask == 0).any() and (mask != 0).any()
    kw_mask = dict(kw, dropout_mask=mask)
    grads = reference.attention_grad(q, k, v, do, dlse=dlse, **kw_mask)
    without = reference.attention_grad(q, k, v, do, dlse=dlse, **kw)
    arrays = [q.copy(), k.copy(), v.copy()]
    for index, name in enumerate(("dq", "dk", "dv")):
        x = arrays[index]
        assert grads[index].shape == x.shape and grads[index].dtype == np.float64
        fd = np.zeros_like(x)
        for pos in np.ndindex(x.shape):
            saved = x[pos]
            x[pos] = saved + H
            plus = _loss(*arrays, do, dlse, kw_mask)
            x[pos] = saved - H
            minus = _loss(*arrays, do, dlse, kw_mask)
            x[pos] = saved
            fd[pos] = (plus - minus) / (2 * H)
        scale = max(np.abs(fd).max(initial=0.0), 1.0)
        err = np.abs(grads[index] - fd).max(initial=0.0)
        assert err <= RTOL * scale, f"{name}: |analytic - FD| = {err:.3g}, relative {err / scale:.3g}"
        # The mask matters: the undropped gradient is far from it.
        assert np.abs(without[index] - fd).max() > 1e3 * RTOL * scale, name
