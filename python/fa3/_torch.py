"""fa3 as PyTorch operators: `fa3::attention_fwd` and `fa3::attention_bwd`
are `torch.library` custom ops with fake (meta) implementations, so
`torch.compile` traces them without graph breaks, and the forward's autograd
formula runs the backward kernels. Both launch on the current CUDA stream.

Imported only when torch tensors reach fa3 (numpy users need no torch).
"""

import torch

from . import _jit
from ._spec import AttentionSpec

DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
FP8 = torch.float8_e4m3fn


def _spec(q, k, v, causal, scale, window_left, window_right, softcap):
    return AttentionSpec(dtype="f8E4M3FN" if q.dtype == FP8 else DTYPES[q.dtype], num_heads=q.shape[2], num_kv_heads=k.shape[2],
                         head_dim=q.shape[3], head_dim_v=v.shape[3], causal=causal, scale=scale,
                         window=(window_left, window_right), softcap=softcap)


def _stream(t):
    return torch.cuda.current_stream(t.device).cuda_stream


@torch.library.custom_op("fa3::attention_fwd", mutates_args=())
def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                  window_left: int, window_right: int, softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
    spec = _spec(q, k, v, causal, scale, window_left, window_right, softcap)
    kernel = _jit.get(spec, "cuda", "fwd", block_m=_jit.forward_block_m(spec, q.shape[1]))
    # The kernel reads dense [B, S, H, D] tensors: other layouts are copied.
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    b, sq, hq, _ = q.shape
    out = torch.empty((b, sq, hq, v.shape[3]), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    kernel.launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                  b, sq, k.shape[1], _stream(q))
    return out, lse


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, causal, scale, window_left, window_right, softcap):
    b, sq, hq, _ = q.shape
    return (q.new_empty((b, sq, hq, v.shape[3])),
            q.new_empty((b, hq, sq), dtype=torch.float32))


@torch.library.custom_op("fa3::attention_bwd", mutates_args=())
def attention_bwd(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  out: torch.Tensor, lse: torch.Tensor, causal: bool, scale: float, window_left: int,
                  window_right: int, softcap: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    kernel = _jit.get(_spec(q, k, v, causal, scale, window_left, window_right, softcap), "cuda", "bwd")
    grad_out, q, k, v, out, lse = (t.contiguous() for t in (grad_out, q, k, v, out, lse))
    b, sq, sk = q.shape[0], q.shape[1], k.shape[1]
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    # Scratch the launch initializes itself: the f32 dQ accumulator, LSE in
    # base 2 and the row dot products (O(N), from torch's caching allocator).
    workspace = torch.empty(max(kernel.workspace_bytes(b, sq, sk), 256), dtype=torch.uint8, device=q.device)
    kernel.launch_grad(grad_out.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                       lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), workspace.data_ptr(),
                       b, sq, sk, _stream(q))
    return dq, dk, dv


@attention_bwd.register_fake
def _attention_bwd_fake(grad_out, q, k, v, out, lse, causal, scale, window_left, window_right, softcap):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, window_left, window_right, softcap = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.options = (causal, scale, window_left, window_right, softcap)
    # The LSE is an output for inspection; gradients do not flow through it.
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.fa3.attention_bwd(grad_out, q, k, v, out, lse, *ctx.options)
    return dq, dk, dv, None, None, None, None, None


attention_fwd.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("fa3::attention_fp8_fwd", mutates_args=())
def attention_fp8_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_descale: torch.Tensor,
                      k_descale: torch.Tensor, v_descale: torch.Tensor, causal: bool, scale: float,
                      window_left: int, window_right: int, softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The FP8 forward (no autograd: e4m3 tensors carry no gradient). The
    launch first writes V' (V transposed, keys permuted) into a workspace."""
    kernel = _jit.get(_spec(q, k, v, causal, scale, window_left, window_right, softcap), "cuda", "fwd")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    q_descale, k_descale, v_descale = (d.contiguous().float() for d in (q_descale, k_descale, v_descale))
    b, sq, hq, _ = q.shape
    sk = k.shape[1]
    out = torch.empty((b, sq, hq, v.shape[3]), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    workspace = torch.empty(max(kernel.forward_workspace_bytes(b, sq, sk), 256), dtype=torch.uint8, device=q.device)
    kernel.launch_fp8(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                      q_descale.data_ptr(), k_descale.data_ptr(), v_descale.data_ptr(), workspace.data_ptr(),
                      b, sq, sk, _stream(q))
    return out, lse


@attention_fp8_fwd.register_fake
def _attention_fp8_fwd_fake(q, k, v, q_descale, k_descale, v_descale, causal, scale, window_left, window_right,
                            softcap):
    b, sq, hq, _ = q.shape
    return (q.new_empty((b, sq, hq, v.shape[3]), dtype=torch.bfloat16),
            q.new_empty((b, hq, sq), dtype=torch.float32))
