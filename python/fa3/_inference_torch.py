"""fa3.attention_varlen and fa3.attention_with_kvcache on torch CPU tensors
(CUDA tensors: fa3._varlen_cuda and fa3._kvcache_cuda):
`torch.library` custom ops (`fa3::attention_varlen_fwd/bwd`,
`fa3::attention_with_kvcache`) over the numpy entry points of
fa3._inference, with fake implementations so that torch.compile traces
them without a graph break, and autograd for the packed attention (its
backward is fa3.attention_varlen_grad, through the output and the LSE).

Tensors cross to numpy without copies where the dtype allows (bfloat16 is
reinterpreted through int16, as numpy has no bfloat16 of its own).
Imported on first use by fa3._inference, when a torch tensor arrives.
"""

from typing import Optional

import ml_dtypes
import numpy as np
import torch

from . import _inference

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _to_numpy(t):
    t = t.detach().contiguous()
    if t.dtype is torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _to_torch(a):
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def check_cpu_tensors(**tensors):
    """torch tensors must be CPU tensors of one float dtype (or int32 for the
    offsets, lengths and page tables, named `cu_*`, `*seqlens*`, `seqused_k`
    and `page_table`)."""
    dtype = None
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor like the others, got {type(t).__name__}")
        if t.device.type != "cpu":
            raise ValueError(f"{name} is on {t.device}; fa3's varlen attention and attention_with_kvcache take "
                             "all their tensors on q's device, the CPU or a CUDA GPU")
        if name.startswith("cu_") or "seqlens" in name or name in ("seqused_k", "page_table"):
            if t.dtype != torch.int32:
                raise TypeError(f"{name} must be an int32 tensor, got {t.dtype}")
            continue
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; fa3 takes float32, float16 or bfloat16")
        if dtype is not None and t.dtype != dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {dtype}; they must match")
        dtype = dtype or t.dtype


# --- packed variable-length batches ---------------------------------------------


@torch.library.custom_op("fa3::attention_varlen_fwd", mutates_args=())
def attention_varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                         cu_seqlens_k: torch.Tensor, seqused_k: Optional[torch.Tensor], max_seqlen_q: int,
                         max_seqlen_k: int, causal: bool, scale: float, window_left: int, window_right: int,
                         softcap: float, num_splits: int, pack_gqa: bool) -> tuple[torch.Tensor, torch.Tensor]:
    out, lse = _inference.attention_varlen(
        _to_numpy(q), _to_numpy(k), _to_numpy(v), _to_numpy(cu_seqlens_q), _to_numpy(cu_seqlens_k),
        max_seqlen_q, max_seqlen_k, causal=causal, softmax_scale=scale, window_size=(window_left, window_right),
        softcap=softcap, return_lse=True, seqused_k=None if seqused_k is None else _to_numpy(seqused_k),
        num_splits=num_splits, pack_gqa=pack_gqa)
    return _to_torch(out), _to_torch(lse)


@attention_varlen_fwd.register_fake
def _attention_varlen_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, causal,
                               scale, window_left, window_right, softcap, num_splits, pack_gqa):
    return (q.new_empty((q.shape[0], q.shape[1], v.shape[2])),
            q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32))


@torch.library.custom_op("fa3::attention_varlen_bwd", mutates_args=())
def attention_varlen_bwd(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         out: torch.Tensor, lse: torch.Tensor, grad_lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                         cu_seqlens_k: torch.Tensor, seqused_k: Optional[torch.Tensor], causal: bool, scale: float,
                         window_left: int, window_right: int,
                         softcap: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    grads = _inference.attention_varlen_grad(
        _to_numpy(grad_out), _to_numpy(q), _to_numpy(k), _to_numpy(v), _to_numpy(out), _to_numpy(lse),
        _to_numpy(cu_seqlens_q), _to_numpy(cu_seqlens_k), causal=causal, softmax_scale=scale,
        window_size=(window_left, window_right), softcap=softcap, dlse=_to_numpy(grad_lse),
        seqused_k=None if seqused_k is None else _to_numpy(seqused_k))
    return tuple(_to_torch(g) for g in grads)


@attention_varlen_bwd.register_fake
def _attention_varlen_bwd_fake(grad_out, q, k, v, out, lse, grad_lse, cu_seqlens_q, cu_seqlens_k, seqused_k, causal,
                               scale, window_left, window_right, softcap):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _varlen_setup_context(ctx, inputs, output):
    q, k, v, cu_q, cu_k, used, _, _, causal, scale, left, right, softcap, _, _ = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, used)
    ctx.options = (causal, scale, left, right, softcap)


def _varlen_backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, cu_q, cu_k, used = ctx.saved_tensors
    grad_out = torch.zeros_like(out) if grad_out is None else grad_out
    grad_lse = torch.zeros_like(lse) if grad_lse is None else grad_lse
    dq, dk, dv = torch.ops.fa3.attention_varlen_bwd(grad_out, q, k, v, out, lse, grad_lse, cu_q, cu_k, used,
                                                    *ctx.options)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None, None, None


attention_varlen_fwd.register_autograd(_varlen_backward, setup_context=_varlen_setup_context)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale, window,
                     softcap, num_splits, pack_gqa, seqused_k=None):
    check_cpu_tensors(q=q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k)
    if q.dim() != 3 or k.dim() != 3 or k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"q and k must be (total, heads, head_dim) with q's heads a positive multiple of k's, "
                         f"got {tuple(q.shape)} and {tuple(k.shape)}")
    pack_gqa = _inference._resolve_pack_gqa(pack_gqa, None, q.shape[1], k.shape[1])
    return torch.ops.fa3.attention_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, int(max_seqlen_q),
                                              int(max_seqlen_k), causal, scale, window[0], window[1], softcap,
                                              int(num_splits), bool(pack_gqa))


# --- KV cache -----------------------------------------------------------------


@torch.library.custom_op("fa3::attention_with_kvcache", mutates_args=("k_cache", "v_cache"))
def attention_with_kvcache_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                              k: torch.Tensor | None, v: torch.Tensor | None, cache_seqlens: torch.Tensor,
                              page_table: torch.Tensor | None, causal: bool, scale: float, window_left: int,
                              window_right: int, softcap: float, num_splits: int,
                              pack_gqa: bool) -> tuple[torch.Tensor, torch.Tensor]:
    # The caches are written through numpy views of the same memory.
    k_np, v_np = _to_numpy(k_cache), _to_numpy(v_cache)
    out, lse = _inference.attention_with_kvcache(
        _to_numpy(q), k_np, v_np, k=None if k is None else _to_numpy(k), v=None if v is None else _to_numpy(v),
        cache_seqlens=_to_numpy(cache_seqlens), page_table=None if page_table is None else _to_numpy(page_table),
        causal=causal, softmax_scale=scale, window_size=(window_left, window_right), softcap=softcap,
        return_lse=True, num_splits=num_splits, pack_gqa=pack_gqa)
    return _to_torch(out), _to_torch(lse)


@attention_with_kvcache_op.register_fake
def _attention_with_kvcache_fake(q, k_cache, v_cache, k, v, cache_seqlens, page_table, causal, scale, window_left,
                                 window_right, softcap, num_splits, pack_gqa):
    b, sq, hq, _ = q.shape
    return q.new_empty((b, sq, hq, v_cache.shape[3])), q.new_empty((b, hq, sq), dtype=torch.float32)


def attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, page_table, causal, scale, window, softcap,
                           num_splits, pack_gqa):
    check_cpu_tensors(q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v, cache_seqlens=cache_seqlens,
                      page_table=page_table)
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if k is not None and not cache.is_contiguous():
            raise ValueError(f"{name} must be contiguous: the new rows are written into it in place")
    return torch.ops.fa3.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, page_table, causal,
                                                scale, window[0], window[1], softcap, int(num_splits), pack_gqa)
