"""Inference-time attention: packed variable-length batches
(`attention_varlen`, FlashAttention's `flash_attn_varlen_func`) and KV
caches, contiguous or paged, with appends (`attention_with_kvcache`,
FlashAttention's `flash_attn_with_kvcache`).

Both compile one MLIR function per specialization (fa3.attention_varlen;
fa3.kvcache_append + fa3.attention_kvcache) and run it through the CPU
pipeline on numpy arrays; torch CPU tensors go through the custom ops of
fa3._inference_torch (autograd for the packed attention, torch.compile). The sequence offsets, lengths and page tables are
data: one compiled function serves every batch, and the checks here, on
their values, are what keeps a call from reading another sequence's rows.
CUDA tensors: attention_with_kvcache on a contiguous or paged cache runs
its Hopper kernels (fa3._kvcache_cuda), attention_varlen its forward kernel
(fa3._varlen_cuda; its backward has none yet).
"""

import sys

import numpy as np

from . import _jit
from ._spec import CPU_BLOCK_M as _CPU_BLOCK_M
from ._spec import AttentionSpec, check_last_dim_contiguous, check_options

_NUMPY_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def _torch_inputs(*tensors):
    """Whether the call has torch tensors (then fa3._inference_torch runs it)."""
    torch = sys.modules.get("torch")
    return torch is not None and any(isinstance(t, torch.Tensor) for t in tensors)


def _resolve_pack_gqa(pack_gqa, seq_q, hq, hkv):
    """pack_gqa as given, or by fa3's rule when None (a packed batch,
    `seq_q` None: always, as FlashAttention-3 packs varlen); checked."""
    group = hq // hkv
    if pack_gqa is None:
        pack_gqa = group <= _CPU_BLOCK_M and (
            seq_q is None or _jit._module().should_pack_gqa(seq_q, group, _CPU_BLOCK_M))
    elif not isinstance(pack_gqa, bool):
        raise TypeError(f"pack_gqa must be a bool or None, got {type(pack_gqa).__name__}")
    elif pack_gqa and group > _CPU_BLOCK_M:
        raise ValueError(f"pack_gqa=True packs the {group} query heads of a KV head into one tile row group, "
                         f"more than the tile's {_CPU_BLOCK_M} rows")
    return bool(pack_gqa and group > 1)


def _dtype_name(name, a, like=None):
    """The fa3 element type of numpy array `a` (argument `name`), which must
    match `like`'s dtype when given."""
    if not isinstance(a, np.ndarray):
        kind = "a torch tensor" if type(a).__module__.startswith("torch") else type(a).__name__
        raise TypeError(f"{name} must be a numpy.ndarray, got {kind} (q decides: numpy arrays or torch CPU "
                        "tensors, all of one kind)")
    dtype = _NUMPY_DTYPES.get(a.dtype.name)
    if dtype is None:
        raise TypeError(f"{name} has dtype {a.dtype}; fa3 takes float32, float16 or ml_dtypes.bfloat16")
    if like is not None and a.dtype != like.dtype:
        raise TypeError(f"{name} has dtype {a.dtype} but q has {like.dtype}; they must match")
    return dtype


def _int32_vector(name, a, length=None):
    """An int32 numpy vector argument (offsets, lengths), checked."""
    if not isinstance(a, np.ndarray) or a.dtype != np.int32:
        raise TypeError(f"{name} must be an int32 numpy array, got "
                        f"{getattr(a, 'dtype', type(a).__name__)}")
    if a.ndim != 1 or (length is not None and a.shape[0] != length):
        want = f"({length},)" if length is not None else "1-D"
        raise ValueError(f"{name} must have shape {want}, got {a.shape}")
    return np.ascontiguousarray(a)


def _check_heads(q_heads, k_shape, v_shape, d, names=("k", "v")):
    """GQA head counts and head dims shared by both entry points; returns
    (Hkv, Dv)."""
    hkv, dv = k_shape[-2], v_shape[-1]
    if v_shape[-2] != hkv:
        raise ValueError(f"{names[0]} has {hkv} heads but {names[1]} has {v_shape[-2]}")
    if hkv == 0 or q_heads % hkv:
        raise ValueError(f"q's {q_heads} heads must be a positive multiple of {names[0]}/{names[1]}'s "
                         f"{hkv} heads (GQA)")
    if k_shape[-1] != d:
        raise ValueError(f"head dims differ: q has {d}, {names[0]} has {k_shape[-1]}")
    for name, dim in (("q/k", d), ("v", dv)):
        if dim <= 0 or dim > 256 or dim % 8:
            raise ValueError(f"{name} head dim must be a multiple of 8 in [8, 256], got {dim}")
    return hkv, dv


def _make_spec(dtype, hq, hkv, d, dv, causal, softmax_scale, window_size, softcap):
    """The AttentionSpec of a call, with the mask options checked and
    resolved (check_options)."""
    causal, scale, window, softcap = check_options(causal, softmax_scale, window_size, softcap, d)
    return AttentionSpec(dtype=dtype, num_heads=hq, num_kv_heads=hkv, head_dim=d, head_dim_v=dv,
                         causal=causal, scale=scale, window=window, softcap=softcap)


def _check_num_splits(num_splits):
    if isinstance(num_splits, bool) or not isinstance(num_splits, (int, np.integer)) or num_splits < 0:
        raise ValueError(f"num_splits must be an int >= 0 (0: fa3 chooses), got {num_splits!r}")


def _contiguous(name, a):
    check_last_dim_contiguous(name, a)
    return np.ascontiguousarray(a)


def _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k):
    """Checks the packed tensors and their offsets; returns (dtype, Hq, Hkv,
    D, Dv, cu_q, cu_k, query lengths, key lengths)."""
    dtype = _dtype_name("q", q)
    _dtype_name("k", k, like=q)
    _dtype_name("v", v, like=q)
    for name, a, layout in (("q", q, "(total_q, num_heads, head_dim)"),
                            ("k", k, "(total_k, num_kv_heads, head_dim)"),
                            ("v", v, "(total_k, num_kv_heads, head_dim_v)")):
        if a.ndim != 3:
            raise ValueError(f"{name} must have 3 dims {layout}, got shape {a.shape}")
    if k.shape[0] != v.shape[0]:
        raise ValueError(f"k and v must have the same number of tokens, got {k.shape[0]} and {v.shape[0]}")
    hq, d = q.shape[1], q.shape[2]
    hkv, dv = _check_heads(hq, k.shape, v.shape, d)
    cu_q = _int32_vector("cu_seqlens_q", cu_seqlens_q)
    cu_k = _int32_vector("cu_seqlens_k", cu_seqlens_k, length=cu_q.shape[0])
    seq_q, seq_k = _check_offsets(cu_q, cu_k, q.shape[0], k.shape[0])
    return dtype, hq, hkv, d, dv, cu_q, cu_k, seq_q, seq_k


def _check_offsets(cu_q, cu_k, total_q, total_k):
    """Checks the values of the int32 offsets (numpy vectors of one length,
    batch + 1 >= 1) against the `total_q` / `total_k` packed rows; returns
    the (query, key) lengths of the sequences. Shared by the CPU path and
    the CUDA one (which copies the offsets to the host for it)."""
    if cu_q.shape[0] == 0:
        raise ValueError("cu_seqlens_q must have batch + 1 >= 1 entries, got 0")
    lengths = []
    for name, cu, total in (("cu_seqlens_q", cu_q, total_q), ("cu_seqlens_k", cu_k, total_k)):
        if cu[0] != 0:
            raise ValueError(f"{name} must start at 0, got {cu[0]}")
        steps = np.diff(cu)
        if (steps < 0).any():
            b = int(np.argmax(steps < 0))
            raise ValueError(f"{name} must be non-decreasing, but {name}[{b + 1}] = {cu[b + 1]} < "
                             f"{name}[{b}] = {cu[b]}")
        if cu[-1] > total:
            raise ValueError(f"{name}[-1] = {cu[-1]} exceeds the {total} packed rows of "
                             f"{'q' if name.endswith('q') else 'k and v'}")
        lengths.append(steps)
    return lengths[0], lengths[1]


def _check_max_seqlens(max_seqlen_q, max_seqlen_k, seq_q, seq_k):
    """`max_seqlen_q` / `max_seqlen_k` are ints at least the longest query /
    key length (`seq_q`, `seq_k`: numpy vectors; seq_k counts the used keys
    with seqused_k)."""
    for name, given, longest in (("max_seqlen_q", max_seqlen_q, seq_q), ("max_seqlen_k", max_seqlen_k, seq_k)):
        if isinstance(given, bool) or not isinstance(given, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(given).__name__}")
        if longest.size and given < longest.max():
            raise ValueError(f"{name} = {given} is less than the longest sequence ({longest.max()})")


def _check_seqused_k(seqused_k, seq_k):
    """`seqused_k` as int32, one entry per sequence, each in [0, its key count]."""
    used = _int32_vector("seqused_k", seqused_k, length=seq_k.shape[0])
    bad = (used < 0) | (used > seq_k)
    if bad.any():
        b = int(np.argmax(bad))
        raise ValueError(f"seqused_k[{b}] = {used[b]} must lie in [0, {seq_k[b]}] (sequence {b}'s keys)")
    return used


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                     softmax_scale=None, window_size=(-1, -1), softcap=0.0, return_lse=False, seqused_k=None,
                     num_splits=1, pack_gqa=None, deterministic=False):
    """Attention over a packed batch of variable-length sequences, in
    FlashAttention's `flash_attn_varlen_func` layout (numpy arrays, CPU).

    q: (total_q, num_heads, head_dim); k: (total_k, num_kv_heads, head_dim);
    v: (total_k, num_kv_heads, head_dim_v). Sequence b owns query rows
    cu_seqlens_q[b]:cu_seqlens_q[b+1] and key rows
    cu_seqlens_k[b]:cu_seqlens_k[b+1] (int32 arrays of batch + 1 offsets,
    non-decreasing from 0); with `seqused_k` (int32, (batch,)) only its first
    seqused_k[b] keys take part. `max_seqlen_q`/`max_seqlen_k` must be at
    least the longest sequence (FlashAttention sizes its grid by them; here
    they are checked). `causal` and `window_size` align each sequence at its
    own bottom-right corner. Returns out (total_q, num_heads, head_dim_v) or
    (out, lse) with lse (num_heads, total_q) float32, -inf for rows that see
    no key; rows past cu_seqlens_q[-1] get out = 0, lse = -inf.
    `num_splits` > 1 splits each sequence's keys (split-KV, as in
    `attention_with_kvcache`); `pack_gqa` packs the query heads of each KV
    head into one tile (None: packed whenever heads are grouped, as
    FlashAttention-3 does for packed batches, whose per-sequence lengths it
    does not know when it chooses). `attention_varlen_grad` is its backward.
    `deterministic=True` makes autograd's gradients bit-identical from run
    to run on CUDA (the CPU backward always is).

    torch CPU tensors (float32/float16/bfloat16, int32 offsets) work too, with
    autograd through the output and the LSE and under torch.compile (the op
    is `torch.ops.fa3.attention_varlen_fwd`). torch CUDA tensors (bf16/f16,
    head dims multiples of 8 up to 256, with kernels for 64, 128, 192 and
    256 and the others zero-padded to the next, k's and v's equal to q's, int32
    offsets and seqused_k on q's device) run the Hopper kernel of
    fa3.attention_varlen (`torch.ops.fa3.attention_varlen_cuda`, traceable
    by torch.compile), in one split (`num_splits` 0 or 1), packing the
    query heads of each key/value head into one tile (PackGQA) unless
    `pack_gqa=False`. Each call copies the offsets to the host
    once (a device sync) to check them; the grid is sized by the longest
    sequence. Rows of k and v past a sequence's used keys are read and
    masked: they must be finite. Autograd runs the varlen Hopper backward
    (fa3.attention_varlen_grad's kernels, one launch for the packed batch).
    """
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool, got {type(deterministic).__name__}")
    if _torch_inputs(q, k, v):
        for name, x in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
                raise TypeError(f"{name} must be an int, got {type(x).__name__}")
        _check_num_splits(num_splits)
        if not isinstance(return_lse, bool):
            raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__}")
        causal, scale, window, softcap = check_options(causal, softmax_scale, window_size, softcap, q.shape[-1])
        torch = sys.modules["torch"]
        if isinstance(q, torch.Tensor) and q.device.type == "cuda":
            from . import _varlen_cuda

            out, lse = _varlen_cuda.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                                                     int(max_seqlen_k), causal, scale, window, softcap,
                                                     int(num_splits), pack_gqa, seqused_k=seqused_k,
                                                     deterministic=deterministic)
            return (out, lse) if return_lse else out
        from . import _inference_torch

        out, lse = _inference_torch.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                                     max_seqlen_k, causal, scale, window, softcap,
                                                     max(int(num_splits), 1), pack_gqa, seqused_k=seqused_k)
        return (out, lse) if return_lse else out
    dtype, hq, hkv, d, dv, cu_q, cu_k, seq_q, seq_k = _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    if seqused_k is not None:
        used = _check_seqused_k(seqused_k, seq_k)
        seq_k = used
    _check_max_seqlens(max_seqlen_q, max_seqlen_k, seq_q, seq_k)
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__}")
    _check_num_splits(num_splits)
    pack_gqa = _resolve_pack_gqa(pack_gqa, None, hq, hkv)
    spec = _make_spec(dtype, hq, hkv, d, dv, causal, softmax_scale, window_size, softcap)
    source = spec.varlen_mlir(seqused_k is not None, num_splits=max(int(num_splits), 1), pack_gqa=pack_gqa)
    fn = _jit.get_mlir(source, "attention_varlen", "cpu", "fwd")
    inputs = [_contiguous(n, a) for n, a in (("q", q), ("k", k), ("v", v))] + [cu_q, cu_k]
    if seqused_k is not None:
        inputs.append(used)
    out, lse = fn.run(inputs)
    return (out, lse) if return_lse else out


def attention_varlen_grad(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, causal=False,
                          softmax_scale=None, window_size=(-1, -1), softcap=0.0, dlse=None, seqused_k=None):
    """The backward of `attention_varlen` (numpy arrays, CPU): given the
    gradient `dout` of its output and the forward's `out` and `lse`, returns
    (dq, dk, dv) shaped like q, k and v, with GQA's key/value gradients
    summed over their query heads; rows outside every sequence get 0. The
    options, and `seqused_k` (the keys that took part; the others get zero
    gradients), must be the forward's. `dlse` (float32, like `lse`) is the
    gradient reaching the LSE, if a loss uses it. (FlashAttention's varlen
    backward.)"""
    dtype, hq, hkv, d, dv, cu_q, cu_k, _, seq_k = _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    used = None if seqused_k is None else _check_seqused_k(seqused_k, seq_k)
    o_shape = (q.shape[0], hq, dv)
    for name, a in (("dout", dout), ("out", out)):
        _dtype_name(name, a, like=q)
        if a.shape != o_shape:
            raise ValueError(f"{name} must have shape (total_q, num_heads, head_dim_v) = {o_shape}, got {a.shape}")
    for name, x in (("lse", lse), ("dlse", dlse)):
        if x is None and name == "dlse":
            continue
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.shape != (hq, q.shape[0]):
            raise ValueError(f"{name} must be a float32 array of shape (num_heads, total_q) = {(hq, q.shape[0])}, "
                             f"got {getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
    spec = _make_spec(dtype, hq, hkv, d, dv, causal, softmax_scale, window_size, softcap)
    fn = _jit.get_mlir(spec.varlen_backward_mlir(grad_lse=dlse is not None, seqused_k=used is not None),
                       "attention_varlen_grad", "cpu", "bwd")
    inputs = [_contiguous(n, a) for n, a in (("dout", dout), ("q", q), ("k", k), ("v", v), ("out", out))]
    inputs += [np.ascontiguousarray(lse), cu_q, cu_k]
    if used is not None:
        inputs.append(used)
    if dlse is not None:
        inputs.append(np.ascontiguousarray(dlse))
    return tuple(fn.run(inputs))


def attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, page_table=None,
                           causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
                           return_lse=False, num_splits=0, pack_gqa=None):
    """Attention of new queries against a KV cache, with an optional append,
    in FlashAttention's `flash_attn_with_kvcache` layout (numpy arrays, CPU).

    q: (batch, seqlen_q, num_heads, head_dim). Contiguous cache (no
    `page_table`): k_cache, v_cache (batch, seqlen_cache, num_kv_heads,
    head_dim[_v]). Paged cache: k_cache, v_cache (num_pages, page_size,
    num_kv_heads, head_dim[_v]) and `page_table` int32 (batch, max_pages):
    position j of batch b lives in page page_table[b, j // page_size] at
    slot j % page_size (any page size, pages in any order).

    `cache_seqlens`: int32 (batch,) or an int, the cache length of each batch
    before the call (None: the whole cache, seqlen_cache or max_pages *
    page_size). With `k`, `v` (batch, seqlen_new, num_kv_heads, ...), those
    rows are written into the caches at positions cache_seqlens[b] +
    [0, seqlen_new) — in place: k_cache and v_cache must be writable — and
    the attention sees cache_seqlens + seqlen_new keys. `causal` aligns each
    batch at the bottom-right corner of its own length (query i sees keys
    j <= i + length - seqlen_q). Returns out (batch, seqlen_q, num_heads,
    head_dim_v) or (out, lse) with lse (batch, num_heads, seqlen_q).

    `num_splits` > 1 computes the attention as that many partial attentions
    over ranges of whole key blocks merged by their LSE (split-KV,
    fa3.combine_splits): the structure a GPU runs to fill its SMs when the
    queries alone cannot. 0 (the default) lets fa3 choose; on the CPU, which
    runs the splits one after another, it chooses 1. `pack_gqa` packs the
    query heads of each KV head into the rows of one query tile (PackGQA:
    a decode step's single query fills num_heads / num_kv_heads rows instead
    of one); None lets fa3's rule decide from seqlen_q and the group size.
    Neither changes the result beyond rounding.

    torch CPU tensors work too (the caches are updated in place; the op is
    `torch.ops.fa3.attention_with_kvcache`, traceable by torch.compile; no
    autograd). torch CUDA tensors (bf16/f16, head dims 64/128/256 with v's
    equal to q's, a contiguous or paged cache, `page_table` an int32 CUDA
    tensor) run the Hopper kernel of fa3.attention_kvcache
    (`torch.ops.fa3.attention_kvcache_cuda`): the append by torch indexing
    (through the page table when paged), then one kernel reading each
    batch's length (and page table row) on the device. Cache rows past a
    batch's length are read (and masked): they must hold finite values (a
    cache from torch.zeros, or rows written before), and every page table
    entry must name a page of the cache, unused slots included.
    num_splits = N > 1 on CUDA runs the split-KV kernel (N partial
    attentions into a workspace, then a merge kernel on the same stream);
    0 lets fa3 choose by FlashAttention-3's rule (the query tiles against
    the device's SMs and the cache's key blocks, at most 64 splits),
    rounded up to a power of two; 1 is the kernel of one split.
    """
    if _torch_inputs(q, k_cache, v_cache):
        return _attention_with_kvcache_torch(q, k_cache, v_cache, k, v, cache_seqlens, page_table, causal,
                                             softmax_scale, window_size, softcap, return_lse, num_splits, pack_gqa)
    dtype = _dtype_name("q", q)
    for name, a in (("k_cache", k_cache), ("v_cache", v_cache)):
        _dtype_name(name, a, like=q)
    if q.ndim != 4:
        raise ValueError(f"q must have 4 dims (batch, seqlen_q, num_heads, head_dim), got shape {q.shape}")
    paged = page_table is not None
    layout = "(num_pages, page_size, num_kv_heads, head_dim)" if paged else \
        "(batch, seqlen_cache, num_kv_heads, head_dim)"
    for name, a in (("k_cache", k_cache), ("v_cache", v_cache)):
        if a.ndim != 4:
            raise ValueError(f"{name} must have 4 dims {layout}, got shape {a.shape}")
    if k_cache.shape[:2] != v_cache.shape[:2]:
        raise ValueError(f"k_cache and v_cache differ in their first two dims: {k_cache.shape} vs {v_cache.shape}")
    batch, seq_q, hq, d = q.shape
    hkv, dv = _check_heads(hq, k_cache.shape, v_cache.shape, d, names=("k_cache", "v_cache"))
    if paged:
        if not isinstance(page_table, np.ndarray) or page_table.dtype != np.int32:
            raise TypeError(f"page_table must be an int32 numpy array, got "
                            f"{getattr(page_table, 'dtype', type(page_table).__name__)}")
        if page_table.ndim != 2 or page_table.shape[0] != batch:
            raise ValueError(f"page_table must have shape (batch, max_pages) = ({batch}, max_pages), "
                             f"got {page_table.shape}")
        num_pages, page_size = k_cache.shape[:2]
        if page_size == 0:
            raise ValueError(f"k_cache's page size (dim 1) must be at least 1, got shape {k_cache.shape}")
        capacity = page_table.shape[1] * page_size
    else:
        if k_cache.shape[0] != batch:
            raise ValueError(f"k_cache has batch {k_cache.shape[0]} but q has {batch}")
        capacity = k_cache.shape[1]

    if cache_seqlens is None:
        lens = np.full(batch, capacity if k is None else 0, np.int32)
        if k is not None:
            raise ValueError("appending k and v needs cache_seqlens (where the new rows go)")
    elif isinstance(cache_seqlens, (int, np.integer)) and not isinstance(cache_seqlens, bool):
        lens = np.full(batch, int(cache_seqlens), np.int32)
    else:
        lens = _int32_vector("cache_seqlens", cache_seqlens, length=batch)

    new_rows = 0
    if (k is None) != (v is None):
        raise ValueError("pass k and v together (the rows to append), or neither")
    if k is not None:
        for name, a in (("k", k), ("v", v)):
            _dtype_name(name, a, like=q)
            if a.ndim != 4:
                raise ValueError(f"{name} must have 4 dims (batch, seqlen_new, num_kv_heads, head_dim), "
                                 f"got shape {a.shape}")
        if k.shape[:3] != (batch, k.shape[1], hkv) or k.shape[3] != d:
            raise ValueError(f"k must have shape (batch, seqlen_new, num_kv_heads, head_dim) = "
                             f"({batch}, seqlen_new, {hkv}, {d}), got {k.shape}")
        if v.shape != k.shape[:3] + (dv,):
            raise ValueError(f"v must have shape {k.shape[:3] + (dv,)}, got {v.shape}")
        for name, a in (("k_cache", k_cache), ("v_cache", v_cache)):
            if not a.flags.writeable or not a.flags.c_contiguous:
                raise ValueError(f"{name} must be a writable C-contiguous array: the new rows are "
                                 "written into it in place")
        new_rows = k.shape[1]
    total = lens.astype(np.int64) + new_rows
    bad = (lens < 0) | (total > capacity)
    if bad.any():
        b = int(np.argmax(bad))
        raise ValueError(f"cache_seqlens[{b}] = {lens[b]}" + (f" + {new_rows} new rows" if new_rows else "")
                         + f" must lie in [0, {capacity}] (the cache's capacity"
                         + (" = max_pages * page_size)" if paged else ")"))
    if paged:
        # Only the pages a batch uses must be valid.
        pages_used = -(-total // page_size)
        for b in range(batch):
            row = page_table[b, :pages_used[b]]
            bad = (row < 0) | (row >= num_pages)
            if bad.any():
                j = int(np.argmax(bad))
                raise ValueError(f"page_table[{b}, {j}] = {row[j]} is not a page of the cache "
                                 f"(num_pages = {num_pages})")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__}")
    _check_num_splits(num_splits)
    pack_gqa = _resolve_pack_gqa(pack_gqa, seq_q, hq, hkv)
    spec = _make_spec(dtype, hq, hkv, d, dv, causal, softmax_scale, window_size, softcap)
    source = spec.kvcache_mlir(paged=paged, append=k is not None, num_splits=max(int(num_splits), 1),
                               pack_gqa=pack_gqa)
    fn = _jit.get_mlir(source, "attention_kvcache", "cpu", "fwd")
    inputs = [_contiguous("q", q), np.ascontiguousarray(k_cache), np.ascontiguousarray(v_cache)]
    if k is not None:
        inputs += [_contiguous("k", k), _contiguous("v", v)]
    inputs.append(total.astype(np.int32))
    if k is not None:
        inputs.append(lens)
    if paged:
        inputs.append(np.ascontiguousarray(page_table))
    results = fn.run(inputs)
    out, lse = results[0], results[1]
    if k is not None:
        np.copyto(k_cache, results[2])
        np.copyto(v_cache, results[3])
    return (out, lse) if return_lse else out


def _attention_with_kvcache_torch(q, k_cache, v_cache, k, v, cache_seqlens, page_table, causal, softmax_scale,
                                  window_size, softcap, return_lse, num_splits, pack_gqa):
    """attention_with_kvcache on torch CPU tensors: the options resolved
    here, the rest checked by the numpy path inside the custom op."""
    import torch

    if isinstance(q, torch.Tensor) and q.device.type == "cuda":
        from . import _kvcache_cuda

        if not isinstance(return_lse, bool):
            raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__}")
        _check_num_splits(num_splits)
        out, lse = _kvcache_cuda.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, page_table, causal,
                                                        softmax_scale, window_size, softcap, num_splits, pack_gqa)
        return (out, lse) if return_lse else out

    from . import _inference_torch

    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError(f"q must be a 4-d torch tensor (batch, seqlen_q, num_heads, head_dim), got "
                         f"{getattr(q, 'shape', type(q).__name__)}")
    if not isinstance(k_cache, torch.Tensor) or k_cache.dim() != 4:
        raise ValueError(f"k_cache must be a 4-d torch tensor, got {getattr(k_cache, 'shape', type(k_cache).__name__)}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__}")
    _check_num_splits(num_splits)
    batch, seq_q, hq, d = q.shape
    hkv = k_cache.shape[2]
    if hkv == 0 or hq % hkv:
        raise ValueError(f"q's {hq} heads must be a positive multiple of k_cache's {hkv} heads (GQA)")
    pack_gqa = _resolve_pack_gqa(pack_gqa, seq_q, hq, hkv)
    causal, scale, window, softcap = check_options(causal, softmax_scale, window_size, softcap, d)
    if isinstance(cache_seqlens, (int, np.integer)) and not isinstance(cache_seqlens, bool):
        cache_seqlens = torch.full((batch,), int(cache_seqlens), dtype=torch.int32)
    elif cache_seqlens is None:
        if k is not None:
            raise ValueError("appending k and v needs cache_seqlens (where the new rows go)")
        capacity = page_table.shape[1] * k_cache.shape[1] if page_table is not None else k_cache.shape[1]
        cache_seqlens = torch.full((batch,), capacity, dtype=torch.int32)
    out, lse = _inference_torch.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, page_table, causal,
                                                       scale, window, softcap, max(int(num_splits), 1), pack_gqa)
    return (out, lse) if return_lse else out
