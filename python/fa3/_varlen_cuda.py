"""`attention_varlen` on torch CUDA tensors: the Hopper kernel of
fa3.attention_varlen (FlashAttention's `flash_attn_varlen_func` forward).

The packed q, k, v ([T, H, D]) are described to TMA as one [1, T, H, D]
sequence; the kernel's CTA (query tile, head, sequence) reads the
sequence's offsets on the device and loads its tiles at them
(docs/Design.md, section 10). Before the kernel the launch fills O with 0
and the LSE with -inf on the same stream, so that the rows past
cu_seqlens_q[-1] are defined.

The offsets are data on the device, and a wrong one would make the kernel
read another sequence's rows or drop some of its own (the grid is sized by
the longest sequence), so each call copies cu_seqlens_q, cu_seqlens_k and
seqused_k to the host in one transfer and checks them as the CPU path does
(`fa3._inference._check_offsets`): one device sync per call. The grid is
then sized by the longest sequence found there; `max_seqlen_q` and
`max_seqlen_k` are only checked against it.

One kernel per (dtype, heads, head dim, causal, window, softcap, scale,
seqused_k or not, PackGQA or not), one split. With grouped heads the query
heads of each key/value head share tiles (PackGQA) unless pack_gqa=False,
as FlashAttention-3 does for packed batches. The op is
`torch.ops.fa3.attention_varlen_cuda`, with a fake implementation for
torch.compile.

The backward (`torch.ops.fa3.attention_varlen_cuda_bwd`) is one launch of
the Hopper kernels of fa3.attention_varlen_grad (`CudaKernel.
launch_varlen_grad`: preprocessing, main kernel, postprocessing, each over
the sequences and one more grid row that zeroes the rows past the last
sequence), so dq, dk and dv come from torch.empty and every row is written.
It copies the offsets to the host once more (checked again, and the grid
sized by the longest sequence: its full cu_seqlens_k length, which
seqused_k does not shorten, since the CTAs past the used keys zero their
gradients). Head dims the Hopper backward is not compiled for (192) run
zero-padded to the next one (256), as fa3.attention does. Keys past
seqused_k[b] and the rows outside every sequence get zero gradients;
deterministic=True compiles the deterministic kernel (bit-identical dq).
"""

from typing import Optional

import torch
import torch.nn.functional as F

from . import _inference, _jit
from ._torch import _raw_stream  # the current stream's raw handle
from ._spec import AttentionSpec, check_last_dim_contiguous, rounded_cuda_head_dim

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
# Head dims of the Hopper forward (whole 128-byte swizzle atoms), with k's
# and v's equal to q's.
VARLEN_CUDA_HEAD_DIMS = (64, 128, 192, 256)
# The kernel takes the token counts as i32 and the sequences and heads as
# grid dims y and z.
_INT32_MAX = 2**31 - 1
_MAX_GRID_YZ = 65535


def _kernel(spec, seqused_k, device, pack_gqa=False):
    """The compiled varlen kernel of `spec` (with the seqused_k argument or
    not, PackGQA or not) for `device` ("cuda:N", or "ptx": PTX only, no GPU
    needed). No schedule is written: the compiler picks one for unknown
    lengths (the lengths are per sequence)."""
    return _jit.get_mlir(spec.varlen_mlir(seqused_k, pack_gqa=pack_gqa), "attention_varlen", device, "fwd")


def _check_index_vector(name, t, q, length=None):
    """An int32 1-D tensor on q's device, of `length` entries when given."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be an int32 tensor on {q.device}, got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise TypeError(f"{name} must be an int32 tensor, got {t.dtype}")
    if t.device != q.device:
        raise ValueError(f"{name} is on {t.device} but q is on {q.device}; fa3 runs all of them on one device")
    if t.dim() != 1 or (length is not None and t.shape[0] != length):
        want = f"({length},)" if length is not None else "1-D"
        raise ValueError(f"{name} must have shape {want}, got {tuple(t.shape)}")


def check(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k):
    """The CUDA path's checks of types, devices and shapes (nothing read on
    the device); the values of the offsets are checked in the op
    (check_offsets)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
            raise ValueError(f"{name} must be a CUDA tensor like q, got {getattr(t, 'device', type(t).__name__)}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; fa3 runs all of them on one device")
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; fa3 on CUDA takes torch.bfloat16 or torch.float16")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {q.dtype}; they must match")
    for name, t, layout in (("q", q, "(total_q, num_heads, head_dim)"),
                            ("k", k, "(total_k, num_kv_heads, head_dim)"),
                            ("v", v, "(total_k, num_kv_heads, head_dim)")):
        if t.dim() != 3:
            raise ValueError(f"{name} must have 3 dims {layout}, got shape {tuple(t.shape)}")
        check_last_dim_contiguous(name, t)
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape (total_k, num_kv_heads, head_dim) on CUDA, got "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    total_q, hq, d = q.shape
    total_k, hkv, dk = k.shape
    if hkv == 0 or hq % hkv:
        raise ValueError(f"q's {hq} heads must be a positive multiple of k/v's {hkv} heads (GQA)")
    if d % 8 or not 8 <= d <= 256 or dk != d:
        raise ValueError(f"attention_varlen on CUDA takes head dims that are multiples of 8 up to 256 (kernels for "
                         f"{VARLEN_CUDA_HEAD_DIMS}, the others zero-padded to the next), with k's and v's equal to "
                         f"q's, got head_dim {d} (k and v: {dk})")
    if total_q > _INT32_MAX or total_k > _INT32_MAX:
        raise ValueError(f"total_q = {total_q} and total_k = {total_k} must fit in 32 bits")
    if hq > _MAX_GRID_YZ:
        raise ValueError(f"q's {hq} heads exceed the {_MAX_GRID_YZ} the kernel's grid holds")
    _check_index_vector("cu_seqlens_q", cu_seqlens_q, q)
    _check_index_vector("cu_seqlens_k", cu_seqlens_k, q, length=cu_seqlens_q.shape[0])
    if cu_seqlens_q.shape[0] == 0:
        raise ValueError("cu_seqlens_q must have batch + 1 >= 1 entries, got 0")
    batch = cu_seqlens_q.shape[0] - 1
    if batch > _MAX_GRID_YZ:
        raise ValueError(f"{batch} sequences exceed the {_MAX_GRID_YZ} the kernel's grid holds (one CTA row per "
                         "sequence)")
    if seqused_k is not None:
        _check_index_vector("seqused_k", seqused_k, q, length=batch)


def _refuse_capture(cu_seqlens_q):
    """The host copy of the offsets is a device sync, which a CUDA graph
    capture forbids: say so instead of CUDA's "operation not permitted"."""
    if cu_seqlens_q.is_cuda and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("attention_varlen on CUDA copies cu_seqlens_q/k (and seqused_k) to the host to check "
                           "them and size its grid, which a CUDA graph capture forbids; call it outside the "
                           "capture")


def _host_lengths(cu_seqlens_q, cu_seqlens_k, seqused_k, total_q, total_k):
    """Copies the offsets (and seqused_k) to the host in one transfer (a
    device sync) and checks their values as the CPU path does; returns the
    sequences' query counts, key counts and used key counts (the key counts
    without seqused_k), numpy vectors."""
    _refuse_capture(cu_seqlens_q)
    parts = [cu_seqlens_q, cu_seqlens_k] + ([seqused_k] if seqused_k is not None else [])
    host = torch.cat(parts).cpu().numpy()
    n = cu_seqlens_q.shape[0]
    seq_q, seq_k = _inference._check_offsets(host[:n], host[n:2 * n], total_q, total_k)
    used = _inference._check_seqused_k(host[2 * n:], seq_k) if seqused_k is not None else seq_k
    return seq_q, seq_k, used


def check_offsets(cu_seqlens_q, cu_seqlens_k, seqused_k, total_q, total_k, max_seqlen_q, max_seqlen_k):
    """The offsets checked on the host (_host_lengths) and `max_seqlen_q` /
    `max_seqlen_k` against them; returns the longest sequence's query count
    (the grid's)."""
    seq_q, _, used = _host_lengths(cu_seqlens_q, cu_seqlens_k, seqused_k, total_q, total_k)
    _inference._check_max_seqlens(max_seqlen_q, max_seqlen_k, seq_q, used)
    return int(seq_q.max(initial=0))


@torch.library.custom_op("fa3::attention_varlen_cuda", mutates_args=())
def attention_varlen_cuda(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                          cu_seqlens_k: torch.Tensor, seqused_k: Optional[torch.Tensor], max_seqlen_q: int,
                          max_seqlen_k: int, causal: bool, scale: float, window_left: int, window_right: int,
                          softcap: float, pack_gqa: bool = False,
                          deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    total_q, hq, d = q.shape
    total_k, hkv = k.shape[:2]
    batch = cu_seqlens_q.shape[0] - 1
    # In the op, so that a torch.compile'd caller checks every call too.
    longest_q = check_offsets(cu_seqlens_q, cu_seqlens_k, seqused_k, total_q, total_k, max_seqlen_q, max_seqlen_k)
    # The launch fills both before the kernel writes the sequences' rows.
    out = q.new_empty((total_q, hq, d))
    lse = q.new_empty((hq, total_q), dtype=torch.float32)
    if total_q == 0:
        return out, lse
    spec = AttentionSpec(dtype=_DTYPES[q.dtype], num_heads=hq, num_kv_heads=hkv, head_dim=d, head_dim_v=d,
                         causal=causal, scale=scale, window=(window_left, window_right), softcap=softcap)
    kernel = _kernel(spec, seqused_k is not None, f"cuda:{q.device.index}", pack_gqa=pack_gqa)
    # Copies of strided inputs, freed into torch's stream-ordered allocator
    # after the launch.
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    cu_q, cu_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    used = seqused_k.contiguous() if seqused_k is not None else None
    kernel.launch_varlen(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), cu_q.data_ptr(),
                         cu_k.data_ptr(), used.data_ptr() if used is not None else 0, batch, total_q, total_k,
                         longest_q, _raw_stream(q.device.index))
    return out, lse


@attention_varlen_cuda.register_fake
def _attention_varlen_cuda_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, causal,
                                scale, window_left, window_right, softcap, pack_gqa=False, deterministic=False):
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


def _backward_kernel(spec, seqused_k, device):
    """The compiled varlen backward of `spec` (with the seqused_k argument or
    not; deterministic as the spec says) for `device` ("cuda:N", or "ptx":
    PTX only). The LSE's gradient is a launch argument (0: none), not part
    of the compiled function."""
    return _jit.get_mlir(spec.varlen_backward_mlir(seqused_k=seqused_k), "attention_varlen_grad", device, "bwd")


def _backward_grid_lengths(cu_seqlens_q, cu_seqlens_k, seqused_k, total_q, total_k):
    """The offsets checked on the host again (the kernels read them on the
    device); returns the longest sequence's query and key counts, the
    grid's. The key count is cu_seqlens_k's, not seqused_k's: the grid must
    also cover the unused keys, whose gradients the kernel zeroes."""
    seq_q, seq_k, _ = _host_lengths(cu_seqlens_q, cu_seqlens_k, seqused_k, total_q, total_k)
    return int(seq_q.max(initial=0)), int(seq_k.max(initial=0))


@torch.library.custom_op("fa3::attention_varlen_cuda_bwd", mutates_args=())
def attention_varlen_cuda_bwd(grad_out: torch.Tensor, grad_lse: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                              v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                              cu_seqlens_k: torch.Tensor, seqused_k: Optional[torch.Tensor], causal: bool,
                              scale: float, window_left: int, window_right: int, softcap: float,
                              deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    total_q, hq, d = q.shape
    total_k, hkv = k.shape[:2]
    batch = cu_seqlens_q.shape[0] - 1
    longest_q, longest_k = _backward_grid_lengths(cu_seqlens_q, cu_seqlens_k, seqused_k, total_q, total_k)
    if total_q == 0 or total_k == 0:
        # No query or no key: nothing attends, every gradient is 0.
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    if batch + 1 > _MAX_GRID_YZ:
        raise ValueError(f"{batch} sequences exceed the {_MAX_GRID_YZ - 1} the backward's grid holds (one CTA row "
                         "per sequence and one for the rows past them)")
    # Head dims the backward has no kernel for run at the next compiled one:
    # zero columns of q, k add nothing to q·kᵀ, and those of o, dO nothing
    # to Δ = rowsum(dO ∘ O); their gradients are sliced away.
    size = rounded_cuda_head_dim(d, d)
    pad = (lambda t: F.pad(t, (0, size - d))) if size != d else (lambda t: t)
    grad_out, q, k, v, out = (pad(t).contiguous() for t in (grad_out, q, k, v, out))
    lse = lse.contiguous()
    grad_lse = grad_lse.to(torch.float32).contiguous()
    spec = AttentionSpec(dtype=_DTYPES[q.dtype], num_heads=hq, num_kv_heads=hkv, head_dim=size, head_dim_v=size,
                         causal=causal, scale=scale, window=(window_left, window_right), softcap=softcap,
                         deterministic=deterministic)
    kernel = _backward_kernel(spec, seqused_k is not None, f"cuda:{q.device.index}")
    cu_q, cu_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    used = seqused_k.contiguous() if seqused_k is not None else None
    # The kernels write every row (zeros outside the sequences).
    dq, dk, dv = q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)
    # Scratch the launch initializes itself (the f32 dQ accumulator, the
    # statistics, the deterministic turn counters), from torch's caching
    # allocator (256-byte aligned).
    workspace = q.new_empty(max(kernel.workspace_bytes(batch, total_q, total_k), 256), dtype=torch.uint8)
    kernel.launch_varlen_grad(grad_out.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                              lse.data_ptr(), grad_lse.data_ptr(), cu_q.data_ptr(), cu_k.data_ptr(),
                              used.data_ptr() if used is not None else 0, dq.data_ptr(), dk.data_ptr(),
                              dv.data_ptr(), workspace.data_ptr(), batch, total_q, total_k, longest_q, longest_k,
                              _raw_stream(q.device.index))
    if size != d:
        dq, dk, dv = (t[..., :d].contiguous() for t in (dq, dk, dv))
    return dq, dk, dv


@attention_varlen_cuda_bwd.register_fake
def _attention_varlen_cuda_bwd_fake(grad_out, grad_lse, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k,
                                    causal, scale, window_left, window_right, softcap, deterministic=False):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, _max_q, _max_k, causal, scale, window_left, window_right,
     softcap, _pack_gqa, deterministic) = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k)
    ctx.options = (causal, scale, window_left, window_right, softcap, deterministic)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, cu_q, cu_k, used = ctx.saved_tensors
    # Both outputs' gradients (an unused one as zeros: a zero dLSE leaves
    # the backward's Δ as it is).
    grad_out = torch.zeros_like(out) if grad_out is None else grad_out
    grad_lse = torch.zeros_like(lse) if grad_lse is None else grad_lse
    dq, dk, dv = torch.ops.fa3.attention_varlen_cuda_bwd(grad_out.contiguous(), grad_lse.contiguous(), q, k, v, out,
                                                         lse, cu_q, cu_k, used, *ctx.options)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None, None, None


attention_varlen_cuda.register_autograd(_backward, setup_context=_setup_context)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale, window,
                     softcap, num_splits, pack_gqa, seqused_k=None, deterministic=False):
    """(out, lse) on CUDA tensors; the arguments as
    fa3.attention_varlen's, with the options resolved (check_options)."""
    check(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k)
    if num_splits not in (0, 1):
        raise ValueError(f"attention_varlen on CUDA runs in one split (num_splits 0 or 1), got num_splits = "
                         f"{num_splits}: the varlen Hopper kernel has no split-KV")
    if pack_gqa is not None and not isinstance(pack_gqa, bool):
        raise TypeError(f"pack_gqa must be a bool or None, got {type(pack_gqa).__name__}")
    # PackGQA (FlashAttention-3 packs packed batches whenever heads are
    # grouped, as None does here): each consumer warpgroup's 64 rows must
    # hold whole queries, so G = Hq / Hkv must divide 64.
    group = q.shape[1] // k.shape[1]
    if pack_gqa and 64 % group:
        raise ValueError(f"pack_gqa=True needs the {group} query heads per key/value head to divide 64 on CUDA "
                         "(pass None or False; the result is the same)")
    packed = group > 1 and 64 % group == 0 and pack_gqa is not False
    # Head dims without a kernel run at the next compiled one, q, k and v
    # zero-padded (F.pad: differentiable, traced by torch.compile): zero
    # columns leave q·kᵀ unchanged and give v's padding zero output columns,
    # sliced away. `scale` is the original head dim's (already resolved).
    d = q.shape[2]
    size = next(size for size in VARLEN_CUDA_HEAD_DIMS if size >= d)
    if size != d:
        q, k, v = (F.pad(t, (0, size - d)) for t in (q, k, v))
    out, lse = torch.ops.fa3.attention_varlen_cuda(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                                                   max_seqlen_k, causal, scale, window[0], window[1], softcap,
                                                   packed, deterministic)
    return (out[..., :d] if size != d else out), lse
