"""`attention_with_kvcache` on torch CUDA tensors: the Hopper kernel of
fa3.attention_kvcache for a contiguous or a paged cache.

The new rows (`k`, `v`) are written into the caches by torch indexing on
the current stream (through the page table when paged), then one kernel
attends to each batch's first cache_seqlens[b] + seqlen_new keys
(fa3.attention_kvcache through fa3-tile{grid=true}: the lengths and the
page table are read on the device, bottom-right causal per batch, PackGQA
by fa3's rule). A paged cache is (num_pages, page_size, num_kv_heads,
head_dim) with an int32 (batch, max_pages) page table: one kernel serves
every page size.

Split-KV (`num_splits` N > 1): the kernel compiled with num_splits = N
writes N partial attentions per batch (f32, in a workspace allocated per
call) and its combine kernel merges them, on the same stream. num_splits=0
lets fa3 choose N by FlashAttention-3's rule (`choose_num_splits`), rounded
up to a power of two so that at most 7 kernels compile per shape. Inference
only: no autograd. The op is `torch.ops.fa3.attention_kvcache_cuda`
(mutating the caches), so torch.compile traces it without a graph break.
"""

import dataclasses
import functools
from typing import Optional

import torch

from . import _jit
from ._torch import _raw_stream  # the current stream's raw handle
from ._spec import CUDA_HEAD_DIMS, AttentionSpec, check_options, resolve_pack_gqa
from .schedules import schedule as _schedule

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
# The kernel's key count, page_size * max_pages for a paged cache, is an i32.
_INT32_MAX = 2**31 - 1
# The most splits fa3 chooses (FlashAttention-3's cap); an explicit
# num_splits may be larger.
MAX_SPLITS = 64


def _schedule_fields(spec, pack_gqa, seq_q, cache_rows, num_splits=1):
    """The schedule fields of one (spec, packing, length bucket): the cost
    model's, on a non-persistent grid when split (a split-KV grid already
    has B * num_splits batches of tiles)."""
    fields = _jit.forward_schedule_fields(dataclasses.replace(spec, pack_gqa=pack_gqa), seq_q, cache_rows)
    if num_splits > 1:
        fields["persistent"] = False
    return fields


def _kernel(spec, pack_gqa, seq_q, cache_rows, device_index, paged=False, num_splits=1):
    """The compiled kernel of one (spec, packing, length bucket, splits),
    paged or not; `cache_rows` is the key capacity (max_pages * page_size
    when paged). num_splits > 1: the split-KV kernel (launch it with
    launch_[paged_]kvcache_splits and a workspace of
    forward_workspace_bytes)."""
    schedule = _schedule(**_schedule_fields(spec, pack_gqa, seq_q, cache_rows, num_splits))
    source = spec.kvcache_mlir(paged=paged, num_splits=num_splits, pack_gqa=pack_gqa, schedule=schedule)
    return _jit.get_mlir(source, "attention_kvcache", f"cuda:{device_index}", "fwd")


@functools.lru_cache(maxsize=None)
def _multiprocessors(device_index):
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def choose_num_splits(spec, pack_gqa, batch, seq_q, cache_rows, device_index):
    """fa3's num_splits for num_splits=0: FlashAttention-3's rule
    (fa3._fa3.select_num_splits, docs/Design.md section 10) over the
    kernel's (batch, head, query tile) units and the key blocks of the
    cache's capacity on the device's SMs, at most MAX_SPLITS, rounded up to
    a power of two (1, 2, 4, ..., 64). More splits than a short batch has
    key blocks cost a little and are exact (an empty split weighs 0)."""
    fields = _schedule_fields(spec, pack_gqa, seq_q, cache_rows)
    packed_heads = spec.num_heads // spec.num_kv_heads if pack_gqa else 1
    queries_per_tile = fields["block_m"] // packed_heads
    work_tiles = batch * (spec.num_heads // packed_heads) * -(-seq_q // queries_per_tile)
    key_blocks = -(-cache_rows // fields["block_n"])
    n = _jit._module().select_num_splits(work_tiles, _multiprocessors(device_index), key_blocks, MAX_SPLITS)
    return 1 << (max(int(n), 1) - 1).bit_length()


def _check_page_table(q, k_cache, page_table):
    """The paged cache's own checks: the table's dtype, device, shape and
    layout and the caches' page geometry."""
    batch = q.shape[0]
    if not isinstance(page_table, torch.Tensor):
        raise TypeError(f"page_table must be an int32 CUDA tensor on {q.device}, got {type(page_table).__name__}")
    if page_table.dtype != torch.int32:
        raise TypeError(f"page_table must be an int32 tensor, got {page_table.dtype}")
    if page_table.device != q.device:
        raise ValueError(f"page_table is on {page_table.device} but q is on {q.device}; fa3 runs all of them on one "
                         "device")
    if page_table.dim() != 2 or page_table.shape[0] != batch:
        raise ValueError(f"page_table must have shape (batch, max_pages) = ({batch}, max_pages), got "
                         f"{tuple(page_table.shape)}")
    if page_table.shape[1] < 1:
        raise ValueError(f"page_table must have at least one column (max_pages >= 1), got shape "
                         f"{tuple(page_table.shape)}")
    if not page_table.is_contiguous():
        raise ValueError("page_table must be contiguous (row-major (batch, max_pages)): the kernel reads it in place")
    num_pages, page_size = k_cache.shape[:2]
    if page_size < 1:
        raise ValueError(f"k_cache's page size (dim 1) must be at least 1, got shape {tuple(k_cache.shape)}")
    if num_pages < 1:
        raise ValueError(f"k_cache must hold at least one page (dim 0), got shape {tuple(k_cache.shape)}")
    if page_size * page_table.shape[1] > _INT32_MAX:
        raise ValueError(f"page_size * max_pages = {page_size} * {page_table.shape[1]} keys must fit in 32 bits")


def check(q, k_cache, v_cache, k, v, cache_seqlens, page_table, num_splits):
    """The CUDA path's own checks (the shapes and options common with the
    CPU are checked by the caller)."""
    tensors = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "k": k, "v": v}
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
            raise ValueError(f"{name} must be a CUDA tensor like q, got "
                             f"{getattr(t, 'device', type(t).__name__)}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; fa3 runs all of them on one device")
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; fa3 on CUDA takes torch.bfloat16 or torch.float16")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {q.dtype}; they must match")
    paged = page_table is not None
    layout = "(num_pages, page_size, num_kv_heads, head_dim)" if paged else \
        "(batch, seqlen_cache, num_kv_heads, head_dim)"
    if q.dim() != 4 or k_cache.dim() != 4 or v_cache.dim() != 4:
        raise ValueError(f"q, k_cache and v_cache must have 4 dims, got shapes {tuple(q.shape)}, "
                         f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    batch, _, hq, d = q.shape
    if paged:
        if k_cache.shape != v_cache.shape:
            raise ValueError(f"k_cache and v_cache must both be {layout} with one shape, got "
                             f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    elif k_cache.shape[:3] != v_cache.shape[:3] or k_cache.shape[0] != batch:
        raise ValueError(f"k_cache and v_cache must be {layout} with q's batch {batch}, got "
                         f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    hkv = k_cache.shape[2]
    if hkv == 0 or hq % hkv:
        raise ValueError(f"q's {hq} heads must be a positive multiple of k_cache's {hkv} heads (GQA)")
    if (k is None) != (v is None):
        raise ValueError("pass k and v together (the rows to append), or neither")
    if k is not None:
        want = (batch, k.shape[1] if k.dim() == 4 else -1, hkv, d)
        for name, t in (("k", k), ("v", v)):
            if tuple(t.shape) != want:
                raise ValueError(f"{name} must have shape (batch, seqlen_new, num_kv_heads, head_dim) = "
                                 f"{want}, got {tuple(t.shape)}")
    d, dk, dv = q.shape[3], k_cache.shape[3], v_cache.shape[3]
    if d not in CUDA_HEAD_DIMS or dk != d or dv != d:
        raise ValueError(f"attention_with_kvcache on CUDA runs head dims {CUDA_HEAD_DIMS} with k's and v's equal to "
                         f"q's, got {d}, {dk} and {dv}")
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not cache.is_contiguous():
            raise ValueError(f"{name} must be contiguous {layout}: the kernel reads it in place and new rows are "
                             "written into it")
    if paged:
        _check_page_table(q, k_cache, page_table)
    if isinstance(cache_seqlens, torch.Tensor):
        if cache_seqlens.dtype != torch.int32 or cache_seqlens.device != q.device:
            raise TypeError(f"cache_seqlens must be an int32 tensor on {q.device}, got {cache_seqlens.dtype} on "
                            f"{cache_seqlens.device}")
        if tuple(cache_seqlens.shape) != (q.shape[0],):
            raise ValueError(f"cache_seqlens must have shape ({q.shape[0]},), got {tuple(cache_seqlens.shape)}")


def _append_paged(k_cache, v_cache, k, v, cache_seqlens, page_table):
    """Writes k, v at positions cache_seqlens[b] + [0, n) of each batch
    through the page table, after one check (one device sync) that the rows
    fit the table's capacity and that every page a batch uses after the
    append is a page of the cache."""
    b, n = k.shape[:2]
    num_pages, page_size = k_cache.shape[:2]
    max_pages = page_table.shape[1]
    capacity = max_pages * page_size
    total = cache_seqlens.to(torch.int64) + n
    used = (total + page_size - 1) // page_size
    in_use = torch.arange(max_pages, device=k.device)[None, :] < used[:, None]
    bad = in_use & ((page_table < 0) | (page_table >= num_pages))
    low, end, any_bad = torch.stack([cache_seqlens.min().to(torch.int64), total.max(),
                                     bad.any().to(torch.int64)]).tolist()
    if low < 0 or end > capacity:
        raise ValueError(f"cache_seqlens + {n} new rows must lie in [0, {capacity}] (the cache's capacity = "
                         f"max_pages * page_size = {max_pages} * {page_size}), got a range [{low}, {end}]")
    if any_bad:
        i, j = bad.nonzero()[0].tolist()
        raise ValueError(f"page_table[{i}, {j}] = {int(page_table[i, j])} is not a page of the cache "
                         f"(num_pages = {num_pages})")
    pos = cache_seqlens.to(torch.int64)[:, None] + torch.arange(n, device=k.device)
    pages = page_table.to(torch.int64).gather(1, pos // page_size)
    k_cache[pages, pos % page_size] = k
    v_cache[pages, pos % page_size] = v


@torch.library.custom_op("fa3::attention_kvcache_cuda", mutates_args=("k_cache", "v_cache"))
def attention_kvcache_cuda(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           k: Optional[torch.Tensor], v: Optional[torch.Tensor], cache_seqlens: torch.Tensor,
                           page_table: Optional[torch.Tensor], causal: bool, scale: float, window_left: int,
                           window_right: int, softcap: float, pack_gqa: Optional[bool],
                           num_splits: int) -> tuple[torch.Tensor, torch.Tensor]:
    b, sq, hq, d = q.shape
    hkv = k_cache.shape[2]
    paged = page_table is not None
    # The keys a batch can address: the cache's rows, or its table's.
    cache_rows = page_table.shape[1] * k_cache.shape[1] if paged else k_cache.shape[1]
    lengths = cache_seqlens
    if k is not None:
        # The append: rows cache_seqlens[b] + [0, n) of batch b. Positions
        # past the cache would write out of bounds: checked (one device
        # sync), as the CPU checks them.
        n = k.shape[1]
        if paged:
            if b:
                _append_paged(k_cache, v_cache, k, v, cache_seqlens, page_table)
        else:
            end = int((cache_seqlens.to(torch.int64) + n).max()) if b else 0
            low = int(cache_seqlens.min()) if b else 0
            if low < 0 or end > cache_rows:
                raise ValueError(f"cache_seqlens + {n} new rows must lie in [0, {cache_rows}] (the cache's rows), "
                                 f"got a range [{low}, {end}]")
            rows = cache_seqlens.to(torch.int64)[:, None] + torch.arange(n, device=q.device)
            batch = torch.arange(b, device=q.device)[:, None]
            k_cache[batch, rows] = k
            v_cache[batch, rows] = v
        lengths = (cache_seqlens + n).to(torch.int32)
    out = q.new_empty((b, sq, hq, d))
    lse = q.new_empty((b, hq, sq), dtype=torch.float32)
    if b == 0:  # nothing to attend (and no lengths to hand the kernel)
        return out, lse
    spec = AttentionSpec(dtype=_DTYPES[q.dtype], num_heads=hq, num_kv_heads=hkv, head_dim=d, head_dim_v=d,
                         causal=causal, scale=scale, window=(window_left, window_right), softcap=softcap)
    pack = resolve_pack_gqa(pack_gqa, hq, hkv, False, lambda: _jit.should_pack_gqa(spec, sq, cache_rows))
    splits = int(num_splits)
    if splits == 0:
        splits = choose_num_splits(spec, pack, b, sq, cache_rows, q.device.index)
    kernel = _kernel(spec, pack, sq, cache_rows, q.device.index, paged=paged, num_splits=splits)
    q = q.contiguous()
    lengths = lengths.contiguous()
    stream = _raw_stream(q.device.index)
    if splits > 1:
        # The partial attentions (f32 O and LSE of every split), freed into
        # torch's stream-ordered allocator after the launches.
        workspace = torch.empty(max(kernel.forward_workspace_bytes(b, sq, cache_rows), 256), dtype=torch.uint8,
                                device=q.device)
        if paged:
            kernel.launch_paged_kvcache_splits(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(),
                                               lse.data_ptr(), lengths.data_ptr(), page_table.data_ptr(),
                                               workspace.data_ptr(), b, sq, k_cache.shape[0], k_cache.shape[1],
                                               page_table.shape[1], stream)
        else:
            kernel.launch_kvcache_splits(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(),
                                         lse.data_ptr(), lengths.data_ptr(), workspace.data_ptr(), b, sq, cache_rows,
                                         stream)
    elif paged:
        kernel.launch_paged_kvcache(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(),
                                    lse.data_ptr(), lengths.data_ptr(), page_table.data_ptr(), b, sq,
                                    k_cache.shape[0], k_cache.shape[1], page_table.shape[1], stream)
    else:
        kernel.launch_kvcache(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(), lse.data_ptr(),
                              lengths.data_ptr(), b, sq, cache_rows, stream)
    return out, lse


@attention_kvcache_cuda.register_fake
def _attention_kvcache_cuda_fake(q, k_cache, v_cache, k, v, cache_seqlens, page_table, causal, scale, window_left,
                                 window_right, softcap, pack_gqa, num_splits):
    b, sq, hq, _ = q.shape
    return q.new_empty((b, sq, hq, v_cache.shape[3])), q.new_empty((b, hq, sq), dtype=torch.float32)


def attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, page_table, causal, softmax_scale,
                           window_size, softcap, num_splits, pack_gqa):
    """(out, lse) on CUDA tensors; the arguments as fa3.attention_with_kvcache's."""
    check(q, k_cache, v_cache, k, v, cache_seqlens, page_table, num_splits)
    batch, _, hq, d = q.shape
    hkv = k_cache.shape[2]
    causal, scale, window, softcap = check_options(causal, softmax_scale, window_size, softcap, d)
    # Checked now; decided per launch (by fa3's rule when None).
    resolve_pack_gqa(pack_gqa, hq, hkv, False, lambda: False)
    if cache_seqlens is None:
        if k is not None:
            raise ValueError("appending k and v needs cache_seqlens (where the new rows go)")
        cache_seqlens = page_table.shape[1] * k_cache.shape[1] if page_table is not None else k_cache.shape[1]
    if not isinstance(cache_seqlens, torch.Tensor):
        cache_seqlens = torch.full((batch,), int(cache_seqlens), dtype=torch.int32, device=q.device)
    return torch.ops.fa3.attention_kvcache_cuda(q, k_cache, v_cache, k, v, cache_seqlens, page_table, causal, scale,
                                                window[0], window[1], softcap, pack_gqa, int(num_splits))
