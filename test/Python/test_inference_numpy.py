"""fa3.attention_varlen and fa3.attention_with_kvcache on numpy arrays (the
CPU pipeline: fa3.attention_varlen, fa3.kvcache_append and
fa3.attention_kvcache) against the float64 reference, on fresh random
inputs with ragged lengths (0, 1, not multiples of the 64-row tile).

Bound, as in test_attention_numpy.py: the pipeline rounds P and O to the
storage type like the Hopper kernel, so |O − ref| <= 8·u·(1 + max|V|) and
|LSE − ref| <= 1e-4·(1 + |ref|). A row read from the wrong sequence, page
or slot, or a mask aligned to the wrong corner, gives errors of order
max|V| and fails. Appends are checked exactly (they copy rows).
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


def _draw(rng, shape, dtype):
    return rng.standard_normal(shape).astype(np.float32).astype(NP[dtype])


def _offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def _check(out, lse, ref_o, ref_lse, v, dtype, seed):
    o64 = out.astype(np.float64)
    assert not np.isnan(o64).any()
    bound = 8 * U[dtype] * (1 + np.abs(v.astype(np.float64)).max(initial=0))
    err = np.abs(o64 - ref_o).max(initial=0)
    assert err <= bound, f"O error {err:.3g} > {bound:.3g} (FA3_TEST_SEED={seed})"
    seen = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isneginf(lse), ~seen)
    lse_err = np.abs(lse[seen] - ref_lse[seen])
    assert (lse_err <= 1e-4 * (1 + np.abs(ref_lse[seen]))).all(), f"LSE error {lse_err.max():.3g} (seed {seed})"


VARLEN_CASES = [
    # (q lengths, k lengths, hq, hkv, d, dv, dtype, options)
    ([5, 0, 1, 70, 17], [9, 3, 0, 70, 130], 4, 2, 64, 64, "bf16", {"causal": True}),
    ([1000, 1], [1000, 17], 2, 1, 32, 32, "f32", {}),
    ([64, 65, 128], [64, 200, 1], 8, 2, 128, 128, "f16", {"causal": True, "window_size": (20, 0)}),
    ([33, 7], [7, 33], 4, 4, 64, 32, "f32", {"softcap": 4.0, "softmax_scale": 0.3, "window_size": (5, 3)}),
    ([0, 0], [0, 5], 2, 2, 64, 64, "bf16", {}),
]


@pytest.mark.parametrize("case", VARLEN_CASES, ids=lambda c: f"{c[6]}-{len(c[0])}seqs-{c[7]}")
def test_varlen_matches_reference(case):
    lq, lk, hq, hkv, d, dv, dtype, options = case
    rng, seed = _rng(str(case))
    cu_q, cu_k = _offsets(lq), _offsets(lk)
    q = _draw(rng, (cu_q[-1], hq, d), dtype)
    k = _draw(rng, (cu_k[-1], hkv, d), dtype)
    v = _draw(rng, (cu_k[-1], hkv, dv), dtype)
    out, lse = fa3.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), return_lse=True, **options)
    assert out.shape == (cu_q[-1], hq, dv) and out.dtype == q.dtype
    assert lse.shape == (hq, cu_q[-1]) and lse.dtype == np.float32
    ref_o, ref_lse = reference.attention_varlen(
        q, k, v, cu_q, cu_k, causal=options.get("causal", False), scale=options.get("softmax_scale"),
        window=options.get("window_size", (-1, -1)), softcap=options.get("softcap", 0.0))
    _check(out, lse, ref_o, ref_lse, v, dtype, seed)


def test_varlen_seqused_k_and_rows_past_the_last_sequence():
    """seqused_k takes a prefix of each sequence's keys; query rows past
    cu_seqlens_q[-1] belong to no sequence and read out = 0, lse = -inf."""
    rng, seed = _rng("seqused")
    cu_q, cu_k = _offsets([3, 40]), _offsets([50, 90])
    q = _draw(rng, (cu_q[-1] + 5, 4, 64), "f32")
    k = _draw(rng, (cu_k[-1], 2, 64), "f32")
    v = _draw(rng, (cu_k[-1], 2, 64), "f32")
    used = np.array([1, 77], np.int32)
    out, lse = fa3.attention_varlen(q, k, v, cu_q, cu_k, 40, 90, causal=True, return_lse=True, seqused_k=used)
    ref_o, ref_lse = reference.attention_varlen(q, k, v, cu_q, cu_k, seqused_k=used, causal=True)
    _check(out, lse, ref_o, ref_lse, v, "f32", seed)
    assert (out[cu_q[-1]:] == 0).all() and np.isneginf(lse[:, cu_q[-1]:]).all()


def test_varlen_equals_padded_attention_per_sequence():
    """Packing changes nothing: each sequence's rows equal fa3.attention on
    that sequence alone (same pipeline, same tiles), bit for bit."""
    rng, _ = _rng("packed-vs-dense")
    lq, lk = [17, 1, 100], [17, 30, 100]
    cu_q, cu_k = _offsets(lq), _offsets(lk)
    q = _draw(rng, (cu_q[-1], 4, 64), "bf16")
    k = _draw(rng, (cu_k[-1], 2, 64), "bf16")
    v = _draw(rng, (cu_k[-1], 2, 64), "bf16")
    out = fa3.attention_varlen(q, k, v, cu_q, cu_k, 100, 100, causal=True)
    for b in range(3):
        alone = fa3.attention(q[None, cu_q[b]:cu_q[b + 1]], k[None, cu_k[b]:cu_k[b + 1]],
                              v[None, cu_k[b]:cu_k[b + 1]], causal=True)
        np.testing.assert_array_equal(out[cu_q[b]:cu_q[b + 1]], alone[0])


def _paged_cache(rng, batch, lens_capacity, page_size, hkv, d, dv, dtype, spare_pages=3):
    """A paged cache with a shuffled page table covering `lens_capacity`
    positions per batch (and some pages no batch uses)."""
    pages_per_batch = -(-lens_capacity // page_size)
    num_pages = batch * pages_per_batch + spare_pages
    table = rng.permutation(num_pages)[:batch * pages_per_batch].reshape(batch, pages_per_batch).astype(np.int32)
    k_cache = _draw(rng, (num_pages, page_size, hkv, d), dtype)
    v_cache = _draw(rng, (num_pages, page_size, hkv, dv), dtype)
    return k_cache, v_cache, table


@pytest.mark.parametrize("page_size", [1, 16, 64, 256])
def test_paged_cache_matches_reference(page_size):
    rng, seed = _rng(f"paged-{page_size}")
    batch, hq, hkv, d = 3, 8, 2, 64
    k_cache, v_cache, table = _paged_cache(rng, batch, 300, page_size, hkv, d, d, "bf16")
    lens = np.array([0, 1, 300], np.int32)[rng.permutation(3)]
    q = _draw(rng, (batch, 2, hq, d), "bf16")
    out, lse = fa3.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, page_table=table,
                                         causal=True, return_lse=True)
    ref_o, ref_lse = reference.attention_kvcache(q, k_cache.astype(np.float64), v_cache.astype(np.float64),
                                                 lens, table, causal=True)
    _check(out, lse, ref_o, ref_lse, v_cache, "bf16", seed)


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_append_writes_rows_in_place_then_attends(paged):
    rng, seed = _rng(f"append-{paged}")
    batch, hq, hkv, d, dv, new = 2, 4, 2, 64, 32, 5
    if paged:
        k_cache, v_cache, table = _paged_cache(rng, batch, 120, 16, hkv, d, dv, "f32")
    else:
        k_cache, v_cache, table = _draw(rng, (batch, 120, hkv, d), "f32"), _draw(rng, (batch, 120, hkv, dv), "f32"), None
    before_k, before_v = k_cache.copy(), v_cache.copy()
    lens = np.array([17, 115], np.int32)
    q = _draw(rng, (batch, 3, hq, d), "f32")
    k_new, v_new = _draw(rng, (batch, new, hkv, d), "f32"), _draw(rng, (batch, new, hkv, dv), "f32")
    out, lse = fa3.attention_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=lens,
                                         page_table=table, causal=True, return_lse=True)
    # The new rows are where the cache lengths said, everything else is untouched.
    written = np.zeros(k_cache.shape[:2], bool)
    for b in range(batch):
        for i in range(new):
            p = lens[b] + i
            slot = (table[b, p // 16], p % 16) if paged else (b, p)
            np.testing.assert_array_equal(k_cache[slot], k_new[b, i])
            np.testing.assert_array_equal(v_cache[slot], v_new[b, i])
            written[slot] = True
    np.testing.assert_array_equal(k_cache[~written], before_k[~written])
    np.testing.assert_array_equal(v_cache[~written], before_v[~written])
    ref_o, ref_lse = reference.attention_kvcache(q, k_cache.astype(np.float64), v_cache.astype(np.float64),
                                                 lens + new, table, causal=True)
    _check(out, lse, ref_o, ref_lse, v_cache, "f32", seed)


def test_decode_loop_on_a_paged_cache_equals_full_attention():
    """Prefill 37 tokens, then 6 single-token decode steps through a paged
    cache (page size 16): each step's output equals the causal attention of
    the whole sequence so far at its last row."""
    rng, seed = _rng("decode")
    hq, hkv, d, total = 4, 1, 64, 43
    q_all = _draw(rng, (1, total, hq, d), "f16")
    k_all = _draw(rng, (1, total, hkv, d), "f16")
    v_all = _draw(rng, (1, total, hkv, d), "f16")
    k_cache, v_cache, table = _paged_cache(rng, 1, 64, 16, hkv, d, d, "f16")
    prefill = 37
    out = fa3.attention_with_kvcache(q_all[:, :prefill], k_cache, v_cache, k=k_all[:, :prefill],
                                     v=v_all[:, :prefill], cache_seqlens=0, page_table=table, causal=True)
    ref_o, _ = reference.attention(q_all[:, :prefill].astype(np.float64), k_all[:, :prefill].astype(np.float64),
                                   v_all[:, :prefill].astype(np.float64), causal=True)
    bound = 8 * U["f16"] * (1 + np.abs(v_all.astype(np.float64)).max())
    assert np.abs(out.astype(np.float64) - ref_o).max() <= bound
    for t in range(prefill, total):
        step = fa3.attention_with_kvcache(q_all[:, t:t + 1], k_cache, v_cache, k=k_all[:, t:t + 1],
                                          v=v_all[:, t:t + 1], cache_seqlens=t, page_table=table, causal=True)
        ref_o, _ = reference.attention(q_all[:, :t + 1].astype(np.float64), k_all[:, :t + 1].astype(np.float64),
                                       v_all[:, :t + 1].astype(np.float64), causal=True)
        err = np.abs(step[0, 0].astype(np.float64) - ref_o[0, t]).max()
        assert err <= bound, f"step {t}: {err:.3g} > {bound:.3g} (FA3_TEST_SEED={seed})"


def test_contiguous_cache_without_lengths_uses_the_whole_cache():
    rng, seed = _rng("whole-cache")
    q = _draw(rng, (2, 1, 2, 64), "f32")
    k_cache, v_cache = _draw(rng, (2, 70, 2, 64), "f32"), _draw(rng, (2, 70, 2, 64), "f32")
    out, lse = fa3.attention_with_kvcache(q, k_cache, v_cache, return_lse=True)
    ref_o, ref_lse = reference.attention(q, k_cache, v_cache)
    _check(out, lse, ref_o, ref_lse, v_cache, "f32", seed)


# Bad input: a clear error naming the argument, before anything runs.
def _varlen_args():
    q = np.zeros((10, 2, 64), np.float32)
    k = np.zeros((12, 2, 64), np.float32)
    return q, k, k.copy(), np.array([0, 4, 10], np.int32), np.array([0, 6, 12], np.int32), 6, 6


@pytest.mark.parametrize("change, error, match", [
    ({3: np.array([0, 7, 4], np.int32)}, ValueError, r"cu_seqlens_q must be non-decreasing.*\[2\] = 4 < .*\[1\] = 7"),
    ({3: np.array([1, 4, 10], np.int32)}, ValueError, "cu_seqlens_q must start at 0"),
    ({4: np.array([0, 6, 13], np.int32)}, ValueError, r"cu_seqlens_k\[-1\] = 13 exceeds the 12 packed rows"),
    ({4: np.array([0, 12], np.int32)}, ValueError, r"cu_seqlens_k must have shape \(3,\)"),
    ({3: np.array([0, 4, 10], np.int64)}, TypeError, "cu_seqlens_q must be an int32 numpy array"),
    ({5: 5}, ValueError, r"max_seqlen_q = 5 is less than the longest sequence \(6\)"),
    ({1: np.zeros((12, 3, 64), np.float32), 2: np.zeros((12, 3, 64), np.float32)}, ValueError, "q's 2 heads must be a positive multiple of k/v's 3"),
    ({2: np.zeros((11, 2, 64), np.float32)}, ValueError, "k and v must have the same number of tokens"),
    ({0: np.zeros((10, 2, 64), np.float16)}, TypeError, "k has dtype float32 but q has float16"),
])
def test_varlen_bad_arguments(change, error, match):
    args = list(_varlen_args())
    for i, value in change.items():
        args[i] = value
    with pytest.raises(error, match=match):
        fa3.attention_varlen(*args)


def test_varlen_bad_seqused_k():
    with pytest.raises(ValueError, match=r"seqused_k\[1\] = 7 must lie in \[0, 6\]"):
        fa3.attention_varlen(*_varlen_args(), seqused_k=np.array([1, 7], np.int32))


def test_kvcache_bad_arguments():
    q = np.zeros((2, 1, 4, 64), np.float32)
    kc = np.zeros((6, 16, 2, 64), np.float32)
    table = np.array([[0, 1], [2, 3]], np.int32)
    with pytest.raises(ValueError, match=r"cache_seqlens\[1\] = 33 must lie in \[0, 32\].*max_pages \* page_size"):
        fa3.attention_with_kvcache(q, kc, kc.copy(), cache_seqlens=np.array([3, 33], np.int32), page_table=table)
    with pytest.raises(ValueError, match=r"page_table\[1, 1\] = 6 is not a page of the cache \(num_pages = 6\)"):
        fa3.attention_with_kvcache(q, kc, kc.copy(), cache_seqlens=20,
                                   page_table=np.array([[0, 1], [2, 6]], np.int32))
    with pytest.raises(ValueError, match="k_cache must be a writable"):
        ro = kc.copy()
        ro.flags.writeable = False
        fa3.attention_with_kvcache(q, ro, kc.copy(), k=np.zeros((2, 1, 2, 64), np.float32),
                                   v=np.zeros((2, 1, 2, 64), np.float32), cache_seqlens=3, page_table=table)
    with pytest.raises(ValueError, match="pass k and v together"):
        fa3.attention_with_kvcache(q, kc, kc.copy(), k=np.zeros((2, 1, 2, 64), np.float32), cache_seqlens=3,
                                   page_table=table)
    with pytest.raises(ValueError, match="appending k and v needs cache_seqlens"):
        fa3.attention_with_kvcache(q, kc, kc.copy(), k=np.zeros((2, 1, 2, 64), np.float32),
                                   v=np.zeros((2, 1, 2, 64), np.float32), page_table=table)
    with pytest.raises(TypeError, match="page_table must be an int32 numpy array"):
        fa3.attention_with_kvcache(q, kc, kc.copy(), cache_seqlens=3, page_table=table.astype(np.int64))
    with pytest.raises(ValueError, match="page size .dim 1. must be at least 1"):
        fa3.attention_with_kvcache(q, kc[:, :0], kc[:, :0].copy(), cache_seqlens=0, page_table=table)
    with pytest.raises(ValueError, match="k_cache has batch 6 but q has 2"):
        fa3.attention_with_kvcache(q, kc, kc.copy(), cache_seqlens=3)


def test_mixing_numpy_and_torch_is_refused():
    torch = pytest.importorskip("torch")
    q = np.zeros((4, 2, 64), np.float32)
    offsets = np.array([0, 4], np.int32)
    with pytest.raises(TypeError, match="q must be a torch.Tensor like the others, got ndarray"):
        fa3.attention_varlen(q, torch.zeros(4, 2, 64), q, offsets, offsets, 4, 4)


@pytest.mark.parametrize("num_splits", [1, 2, 3, 7, 64])
def test_split_kv_equals_the_unsplit_attention(num_splits):
    """Split-KV (partial attentions over ranges of key blocks, merged by
    fa3.combine_splits) against the reference, with more splits than some
    sequences have key blocks (empty splits weigh 0) and a batch whose
    cache is empty."""
    rng, seed = _rng(f"splits-{num_splits}")
    batch, hq, hkv, d = 4, 8, 2, 64
    k_cache, v_cache, table = _paged_cache(rng, batch, 700, 16, hkv, d, d, "bf16")
    lens = np.array([700, 0, 65, 1], np.int32)
    q = _draw(rng, (batch, 3, hq, d), "bf16")
    out, lse = fa3.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, page_table=table, causal=True,
                                         return_lse=True, num_splits=num_splits)
    ref_o, ref_lse = reference.attention_kvcache(q, k_cache.astype(np.float64), v_cache.astype(np.float64),
                                                 lens, table, causal=True)
    _check(out, lse, ref_o, ref_lse, v_cache, "bf16", seed)


def test_split_kv_bad_num_splits():
    q = np.zeros((1, 1, 2, 64), np.float32)
    kc = np.zeros((1, 8, 2, 64), np.float32)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="num_splits must be an int >= 0"):
            fa3.attention_with_kvcache(q, kc, kc.copy(), num_splits=bad)


def _num_splits_model(tiles, sms, blocks, max_splits=128):
    """The documented rule (docs/Design.md section 10), written out again."""
    if tiles >= 0.8 * sms or blocks <= 4:
        return 1
    limit = min(max_splits, sms, blocks)
    per = lambda s: -(-blocks // s)  # noqa: E731
    ok = [s for s in range(1, limit + 1) if s == 1 or per(s) != per(s - 1)]
    eff = {s: (tiles * s / sms) / np.ceil(tiles * s / sms) for s in ok}
    best = max(eff.values())
    return next(s for s in ok if eff[s] >= 0.85 * best)


def test_num_splits_heuristic():
    select = fa3._jit._module().select_num_splits
    # Enough tiles for 80% of the SMs, or too few key blocks: no split.
    assert select(work_tiles=106, multiprocessors=132, key_blocks=1000) == 1
    assert select(work_tiles=8, multiprocessors=132, key_blocks=4) == 1
    # One tile over 512 key blocks: one split per SM up to max_splits.
    assert select(work_tiles=1, multiprocessors=132, key_blocks=512) == 128
    # ... and within 85% of the best allowed: 14 of at most 16 (14/132 >= 0.85 * 16/132).
    assert select(work_tiles=1, multiprocessors=132, key_blocks=512, max_splits=16) == 14
    # Decode, B=1, 8 KV heads packed (8 tiles), 32k keys in 128-key blocks:
    # 14 splits (112 of 132 SMs busy, efficiency 0.85 of the best).
    assert select(work_tiles=8, multiprocessors=132, key_blocks=256) == 14
    for tiles in (1, 2, 3, 5, 8, 13, 40, 64, 100, 105):
        for blocks in (5, 17, 64, 255, 256, 1000):
            assert select(tiles, 132, blocks) == _num_splits_model(tiles, 132, blocks), (tiles, blocks)


VARLEN_GRAD_CASES = [
    # (q lengths, k lengths, hq, hkv, d, dv, options)
    ([5, 0, 1, 70, 17], [9, 3, 0, 70, 130], 4, 2, 64, 64, {"causal": True}),
    ([33, 64, 65], [40, 64, 7], 4, 1, 32, 48, {"window_size": (9, 4), "softcap": 3.0}),
]


@pytest.mark.parametrize("case", VARLEN_GRAD_CASES, ids=lambda c: f"{len(c[0])}seqs-{c[6]}")
def test_varlen_backward_matches_reference(case):
    """f32 backward against the float64 per-sequence reference: the CPU
    backward accumulates in f32 over at most a few hundred keys, so every
    gradient is within 1e-4 of its largest magnitude (the bound of
    test_attention_numpy.py's dense backward)."""
    lq, lk, hq, hkv, d, dv, options = case
    rng, seed = _rng(str(case))
    cu_q, cu_k = _offsets(lq), _offsets(lk)
    q = _draw(rng, (cu_q[-1] + 3, hq, d), "f32")  # 3 rows past the last sequence
    k = _draw(rng, (cu_k[-1], hkv, d), "f32")
    v = _draw(rng, (cu_k[-1], hkv, dv), "f32")
    dout = _draw(rng, (q.shape[0], hq, dv), "f32")
    out, lse = fa3.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), return_lse=True, **options)
    dq, dk, dv_ = fa3.attention_varlen_grad(dout, q, k, v, out, lse, cu_q, cu_k, **options)
    ref = reference.attention_varlen_grad(
        q, k, v, dout, cu_q, cu_k, causal=options.get("causal", False), window=options.get("window_size", (-1, -1)),
        softcap=options.get("softcap", 0.0))
    for name, got, want in zip(("dq", "dk", "dv"), (dq, dk, dv_), ref):
        assert got.shape == want.shape and got.dtype == np.float32
        err = np.abs(got - want).max(initial=0)
        assert err <= 1e-4 * (1 + np.abs(want).max(initial=0)), f"{name} error {err:.3g} (FA3_TEST_SEED={seed})"
    assert (dq[cu_q[-1]:] == 0).all()


def test_varlen_backward_equals_dense_backward_per_sequence():
    """bf16: each sequence's gradients equal fa3's dense CPU backward on that
    sequence alone, bit for bit (the same tiles in the same order)."""
    rng, _ = _rng("varlen-grad-vs-dense")
    lq, lk = [17, 1, 100], [17, 30, 100]
    cu_q, cu_k = _offsets(lq), _offsets(lk)
    q = _draw(rng, (cu_q[-1], 4, 64), "bf16")
    k = _draw(rng, (cu_k[-1], 2, 64), "bf16")
    v = _draw(rng, (cu_k[-1], 2, 64), "bf16")
    dout = _draw(rng, (cu_q[-1], 4, 64), "bf16")
    out, lse = fa3.attention_varlen(q, k, v, cu_q, cu_k, 100, 100, causal=True, return_lse=True)
    dq, dk, dv = fa3.attention_varlen_grad(dout, q, k, v, out, lse, cu_q, cu_k, causal=True)
    dense = fa3.compile("bf16", 4, 64, num_kv_heads=2, causal=True, device="cpu", backward=True)
    for b in range(3):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        want = dense(dout[None, qs], q[None, qs], k[None, ks], v[None, ks], out[None, qs],
                     np.ascontiguousarray(lse[None, :, qs]))
        np.testing.assert_array_equal(dq[qs], want[0][0])
        np.testing.assert_array_equal(dk[ks], want[1][0])
        np.testing.assert_array_equal(dv[ks], want[2][0])


def test_varlen_backward_bad_arguments():
    q, k, v, cu_q, cu_k, _, _ = _varlen_args()
    out = np.zeros_like(q)
    lse = np.zeros((2, 10), np.float32)
    with pytest.raises(ValueError, match=r"dout must have shape \(total_q, num_heads, head_dim_v\) = \(10, 2, 64\)"):
        fa3.attention_varlen_grad(out[:9], q, k, v, out, lse, cu_q, cu_k)
    with pytest.raises(ValueError, match=r"lse must be a float32 array of shape \(num_heads, total_q\) = \(2, 10\)"):
        fa3.attention_varlen_grad(out, q, k, v, out, lse.T.copy(), cu_q, cu_k)


@pytest.mark.parametrize("seq_q, hq, hkv, num_splits", [(1, 8, 2, 1), (5, 12, 4, 1), (40, 8, 2, 3), (7, 6, 2, 2)])
def test_pack_gqa_matches_reference_and_the_unpacked_tiles(seq_q, hq, hkv, num_splits):
    """PackGQA (the group's query heads as rows of one tile; G = 3 leaves a
    64-row tile with a partial query group) against float64 with causal and
    window masks, and bit for bit against the unpacked tiling (every row's
    arithmetic is the same)."""
    rng, seed = _rng(f"pack-{seq_q}-{hq}-{hkv}-{num_splits}")
    batch, d = 3, 64
    k_cache, v_cache, table = _paged_cache(rng, batch, 200, 16, hkv, d, d, "bf16")
    lens = np.array([200, 1, 77], np.int32)
    q = _draw(rng, (batch, seq_q, hq, d), "bf16")
    options = {"causal": True, "window_size": (50, 0), "num_splits": num_splits}
    packed, lse = fa3.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, page_table=table,
                                            return_lse=True, pack_gqa=True, **options)
    plain, plain_lse = fa3.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, page_table=table,
                                                  return_lse=True, pack_gqa=False, **options)
    np.testing.assert_array_equal(packed, plain)
    np.testing.assert_array_equal(lse, plain_lse)
    ref_o, ref_lse = reference.attention_kvcache(q, k_cache.astype(np.float64), v_cache.astype(np.float64),
                                                 lens, table, causal=True, window=(50, 0))
    _check(packed, lse, ref_o, ref_lse, v_cache, "bf16", seed)


def test_pack_gqa_rule():
    rule = fa3._jit._module().should_pack_gqa
    # Decode: one query fills 1 of 64 rows unpacked, 4 packed.
    assert rule(seq_q=1, group_size=4, block_m=64)
    # 64 queries fill their tiles: nothing to gain.
    assert not rule(seq_q=64, group_size=4, block_m=64)
    # 40 of 64 rows (0.625) vs 160 of 192 (0.83): 0.625 < 0.9 · 0.83, pack.
    assert rule(seq_q=40, group_size=4, block_m=64)
    # 60 of 64 (0.94) vs 240 of 256 (0.94): no.
    assert not rule(seq_q=60, group_size=4, block_m=64)
    assert not rule(seq_q=1, group_size=1, block_m=64)
    with pytest.raises(TypeError, match="pack_gqa must be a bool or None"):
        fa3.attention_with_kvcache(np.zeros((1, 1, 2, 64), np.float32), np.zeros((1, 8, 1, 64), np.float32),
                                   np.zeros((1, 8, 1, 64), np.float32), pack_gqa=1)


@pytest.mark.parametrize("num_splits", [2, 5])
def test_varlen_split_kv_matches_reference(num_splits):
    """Split-KV on a packed batch: each sequence's keys in num_splits ranges
    (sequences shorter than that many blocks leave splits empty); rows past
    the last sequence still read out = 0, lse = -inf."""
    rng, seed = _rng(f"varlen-splits-{num_splits}")
    lq, lk = [5, 0, 1, 70], [300, 3, 0, 129]
    cu_q, cu_k = _offsets(lq), _offsets(lk)
    q = _draw(rng, (cu_q[-1] + 2, 4, 64), "bf16")
    k = _draw(rng, (cu_k[-1], 2, 64), "bf16")
    v = _draw(rng, (cu_k[-1], 2, 64), "bf16")
    out, lse = fa3.attention_varlen(q, k, v, cu_q, cu_k, 70, 300, causal=True, return_lse=True,
                                    num_splits=num_splits)
    ref_o, ref_lse = reference.attention_varlen(q, k, v, cu_q, cu_k, causal=True)
    _check(out, lse, ref_o, ref_lse, v, "bf16", seed)
    assert (out[cu_q[-1]:].astype(np.float32) == 0).all() and np.isneginf(lse[:, cu_q[-1]:]).all()


def test_varlen_backward_with_the_lse_gradient():
    """A loss that also uses the LSE: dlse joins the backward as Δ − dLSE
    (as in fa3.attention_grad), checked against the float64 reference."""
    rng, seed = _rng("varlen-dlse")
    cu_q, cu_k = _offsets([7, 0, 30]), _offsets([12, 4, 30])
    q = _draw(rng, (cu_q[-1], 4, 32), "f32")
    k = _draw(rng, (cu_k[-1], 2, 32), "f32")
    v = _draw(rng, (cu_k[-1], 2, 32), "f32")
    dout = _draw(rng, q.shape, "f32")
    dlse = _draw(rng, (4, cu_q[-1]), "f32")
    out, lse = fa3.attention_varlen(q, k, v, cu_q, cu_k, 30, 30, causal=True, return_lse=True)
    grads = fa3.attention_varlen_grad(dout, q, k, v, out, lse, cu_q, cu_k, causal=True, dlse=dlse)
    ref = reference.attention_varlen_grad(q, k, v, dout, cu_q, cu_k, dlse=dlse, causal=True)
    for name, got, want in zip(("dq", "dk", "dv"), grads, ref):
        err = np.abs(got - want).max(initial=0)
        assert err <= 1e-4 * (1 + np.abs(want).max(initial=0)), f"{name} error {err:.3g} (FA3_TEST_SEED={seed})"


def test_varlen_pack_gqa_is_the_default_and_bit_identical():
    """Packed batches pack the query heads of each KV head by default (as
    FlashAttention-3 does for varlen); the rows are the same bit for bit."""
    rng, _ = _rng("varlen-pack")
    cu_q, cu_k = _offsets([5, 0, 1, 70]), _offsets([9, 3, 0, 130])
    q = _draw(rng, (cu_q[-1], 8, 64), "bf16")
    k = _draw(rng, (cu_k[-1], 2, 64), "bf16")
    v = _draw(rng, (cu_k[-1], 2, 64), "bf16")
    options = dict(causal=True, window_size=(40, 0), return_lse=True, num_splits=2)
    default = fa3.attention_varlen(q, k, v, cu_q, cu_k, 70, 130, **options)
    plain = fa3.attention_varlen(q, k, v, cu_q, cu_k, 70, 130, pack_gqa=False, **options)
    packed = fa3.attention_varlen(q, k, v, cu_q, cu_k, 70, 130, pack_gqa=True, **options)
    for a, b in ((default, packed), (packed, plain)):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    assert "pack_gqa" in fa3._spec.AttentionSpec("bf16", 8, 2, 64, 64).varlen_mlir(pack_gqa=True)


@pytest.mark.parametrize("with_dlse", [False, True])
def test_varlen_backward_with_seqused_k(with_dlse):
    """seqused_k in the backward (FlashAttention-3's varlen backward): only
    each sequence's first seqused_k[b] keys took part, so they get the
    float64 reference's gradients (per sequence over that prefix) and the
    unused keys get exactly 0; with and without the LSE's gradient."""
    rng, seed = _rng(f"varlen-seqused-grad-{with_dlse}")
    lq, lk, used = [9, 0, 70, 1], [20, 5, 130, 3], [13, 5, 65, 0]
    cu_q, cu_k = _offsets(lq), _offsets(lk)
    used = np.array(used, np.int32)
    q = _draw(rng, (cu_q[-1], 4, 32), "f32")
    k = _draw(rng, (cu_k[-1], 2, 32), "f32")
    v = _draw(rng, (cu_k[-1], 2, 48), "f32")
    dout = _draw(rng, (cu_q[-1], 4, 48), "f32")
    dlse = _draw(rng, (4, cu_q[-1]), "f32") if with_dlse else None
    out, lse = fa3.attention_varlen(q, k, v, cu_q, cu_k, 70, 65, causal=True, return_lse=True, seqused_k=used)
    grads = fa3.attention_varlen_grad(dout, q, k, v, out, lse, cu_q, cu_k, causal=True, dlse=dlse,
                                      seqused_k=used)
    ref = reference.attention_varlen_grad(q, k, v, dout, cu_q, cu_k, dlse=dlse, seqused_k=used, causal=True)
    for name, got, want in zip(("dq", "dk", "dv"), grads, ref):
        err = np.abs(got - want).max(initial=0)
        assert err <= 1e-4 * (1 + np.abs(want).max(initial=0)), f"{name} error {err:.3g} (FA3_TEST_SEED={seed})"
    dk, dv = grads[1], grads[2]
    for b in range(len(lk)):
        unused = slice(cu_k[b] + used[b], cu_k[b + 1])
        assert (dk[unused] == 0).all() and (dv[unused] == 0).all(), f"sequence {b}'s unused keys"
    # The used keys do get gradients (the check above is not vacuous).
    assert np.abs(dk[cu_k[2]:cu_k[2] + used[2]]).max() > 0


def test_varlen_backward_bad_seqused_k():
    q, k, v, cu_q, cu_k, _, _ = _varlen_args()
    out = np.zeros_like(q)
    lse = np.zeros((2, 10), np.float32)
    with pytest.raises(ValueError, match=r"seqused_k\[1\] = 7 must lie in \[0, 6\]"):
        fa3.attention_varlen_grad(out, q, k, v, out, lse, cu_q, cu_k, seqused_k=np.array([1, 7], np.int32))
    with pytest.raises(TypeError, match="seqused_k must be an int32 numpy array"):
        fa3.attention_varlen_grad(out, q, k, v, out, lse, cu_q, cu_k, seqused_k=[1, 2])
