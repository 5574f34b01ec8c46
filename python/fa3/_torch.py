"""fa3 on torch CUDA tensors.

Eager calls take a cached plan: the first call of a (shapes, dtypes,
devices, options) combination checks everything and compiles (or fetches)
the kernels; later calls look the plan up in one dict and launch, with the
forward's autograd formula a `torch.autograd.Function` whose backward runs
the backward kernels. Under torch.compile the same launches are the
`torch.library` custom ops `fa3::attention_fwd` and `fa3::attention_bwd`,
with fake (meta) implementations, so the compiler traces them without graph
breaks. Every launch goes to the current CUDA stream of the tensors' device,
and the kernels are loaded on that device (`cuda:N`).

Imported only when torch tensors reach fa3 (numpy users need no torch).
"""

import dataclasses
from typing import Optional

import torch
import torch.nn.functional as F

from . import _jit
from ._spec import (AttentionSpec, check_last_dim_contiguous, check_options, check_shapes, has_cuda_kernel,
                    resolve_pack_gqa, rounded_cuda_head_dim)

DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
FP8 = torch.float8_e4m3fn
_QUANTIZE_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}

# The raw current-stream handle of a device (what inductor's generated code
# calls); the public API builds a Stream object per call.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
if _raw_stream is None:  # pragma: no cover - older torch
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


class Plan:
    """What one (shapes, dtypes, device, options) combination launches: the
    spec, the device, the forward kernel of its length bucket and, once a
    backward has run, the backward kernel."""

    __slots__ = ("spec", "device", "index", "fwd", "bwd", "batch", "seq_q", "seq_k", "out_shape", "out_like_q",
                 "lse_shape", "lse_scratch")

    def __init__(self, spec, device, batch, seq_q, seq_k, out_shape, lse_shape):
        self.spec = spec
        self.device = device
        self.index = device.index
        key = f"cuda:{self.index}"
        self.fwd = _jit.get(spec, key, "fwd", schedule=_jit.forward_schedule(spec, seq_q, seq_k))
        self.bwd = None
        # The launch's B, Sq and Sk (the plan's key holds the shapes).
        self.batch, self.seq_q, self.seq_k = batch, seq_q, seq_k
        self.out_shape = out_shape
        # O of q's shape (Dv = D, as every compiled kernel has today):
        # allocated with empty_like, which parses no shape.
        self.out_like_q = out_shape[3] == spec.head_dim
        self.lse_shape = lse_shape
        # Where inference calls that want no LSE let the kernel write it.
        self.lse_scratch = None

    def backward_kernel(self):
        if self.bwd is None:
            self.bwd = _jit.get(self.spec, f"cuda:{self.index}", "bwd")
        return self.bwd


def _check_tensors(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}; fa3 runs torch tensors on CUDA "
                             "(use numpy arrays for the CPU pipeline)")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; fa3 on CUDA takes torch.bfloat16 or torch.float16")
        check_last_dim_contiguous(name, t)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {q.dtype}; they must match")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; fa3 runs all three on one device")


def _make_spec(q, k, v, causal, scale, window, softcap):
    return AttentionSpec(dtype="f8E4M3FN" if q.dtype == FP8 else DTYPES[q.dtype], num_heads=q.shape[2],
                         num_kv_heads=k.shape[2], head_dim=q.shape[3], head_dim_v=v.shape[3], causal=causal,
                         scale=scale, window=window, softcap=softcap)


_plans = {}
_MAX_PLANS = 4096  # a bound for workloads that see many distinct shapes


def _plan_key(q, k, v, causal, softmax_scale, window_size, softcap, pack_gqa, deterministic, dropout_p):
    """What a plan is a function of: the shapes, dtypes and devices, and the
    options with their types (a `causal=1` is rejected where `True` is
    not, and 1 == True)."""
    return (q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, q.device, k.device, v.device,
            causal, type(causal), softmax_scale, type(softmax_scale), window_size, softcap, type(softcap),
            pack_gqa, type(pack_gqa), deterministic, type(deterministic), dropout_p)


def _cached_plan(q, k, v, causal, softmax_scale, window_size, softcap, pack_gqa, deterministic, dropout_p):
    """(key, plan): this call's cache key and its cached plan (None on a
    miss). A plan exists only for inputs that passed every check once, so
    a hit skips them. An unhashable option (a list window) gives (None,
    None): _new_plan's checks decide."""
    key = _plan_key(q, k, v, causal, softmax_scale, window_size, softcap, pack_gqa, deterministic, dropout_p)
    try:
        return key, _plans.get(key)
    except TypeError:
        return None, None


def _plan(q, k, v, causal, softmax_scale, window_size, softcap, pack_gqa=None, deterministic=False,
          dropout_p=0.0):
    """The plan of this call, from the cache or checked and built."""
    key, plan = _cached_plan(q, k, v, causal, softmax_scale, window_size, softcap, pack_gqa, deterministic,
                             dropout_p)
    if plan is not None:
        return plan
    return _new_plan(key, q, k, v, causal, softmax_scale, window_size, softcap, pack_gqa, deterministic,
                     dropout_p)


def _new_plan(key, q, k, v, causal, softmax_scale, window_size, softcap, pack_gqa, deterministic, dropout_p):
    """Checks a call and builds its plan, cached under `key` (None: not
    cached)."""
    hq, _, d, dv = check_shapes(q.shape, k.shape, v.shape, cuda=True)
    causal, scale, window, softcap = check_options(causal, softmax_scale, window_size, softcap, d)
    _check_tensors(q, k, v)
    b, sq, sk = q.shape[0], q.shape[1], k.shape[1]
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool, got {type(deterministic).__name__}")
    spec = dataclasses.replace(_make_spec(q, k, v, causal, scale, window, softcap), deterministic=deterministic,
                               dropout=float(dropout_p))
    # Dropout's mask is per query head: its tiles are never packed.
    if resolve_pack_gqa(pack_gqa, spec.num_heads, spec.num_kv_heads, spec.fp8 or spec.dropout > 0,
                        lambda: _jit.should_pack_gqa(spec, sq, sk)):
        spec = dataclasses.replace(spec, pack_gqa=True)
    plan = Plan(spec, q.device, b, sq, sk, (b, sq, hq, dv), (b, hq, sq))
    if key is not None:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[key] = plan
    return plan


def dropout_rng(device, words=None):
    """Dropout's Philox (seed, offset) as the int64 [2] tensor on `device`
    the kernels read: `words` (a numpy int64 [2]), or a seed drawn from
    `device`'s generator (torch.manual_seed reproduces it) and offset 0.

    Written on the device by kernels, never copied from the host: a CUDA
    graph captures them (a host copy from pageable memory is not
    capturable), and torch's generators are graph-safe, so every replay of
    a captured call draws a new seed and with it a new mask. Given words
    are fill constants of the graph: every replay uses the same mask."""
    rng = torch.zeros(2, dtype=torch.int64, device=device)
    if words is None:
        rng[:1].random_(-(1 << 63), None)  # every int64
    else:
        rng.fill_(int(words[0]))
        rng[1:].fill_(int(words[1]))
    return rng


def _forward(plan, q, k, v, need_lse=True, rng=None):
    # The kernel reads dense [B, S, H, D] tensors: other layouts are copied.
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    # empty_like parses no shape (CPU tensors: 0.9 µs against new_empty's
    # 1.4 and torch.empty's 1.9 µs a call); q is dense here.
    out = torch.empty_like(q) if plan.out_like_q else q.new_empty(plan.out_shape)
    if need_lse or torch.cuda.is_current_stream_capturing():
        # (A captured graph gets its own LSE: it must not write a buffer the
        # plan cache may drop while the graph lives.)
        lse = q.new_empty(plan.lse_shape, dtype=torch.float32)
    else:
        # Nobody reads this LSE: every such call of the plan writes the same
        # per-plan buffer (one allocation fewer per call; concurrent writers
        # on other streams only race on values no one reads).
        lse = plan.lse_scratch
        if lse is None:
            lse = plan.lse_scratch = q.new_empty(plan.lse_shape, dtype=torch.float32)
    plan.fwd.launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                    plan.batch, plan.seq_q, plan.seq_k, _raw_stream(plan.index),
                    0 if rng is None else rng.data_ptr())
    return q, k, v, out, lse


def _backward(plan, grad_out, q, k, v, out, lse, grad_lse=None, rng=None):
    """dq, dk, dv; `grad_out` or `grad_lse` may be None (no gradient reaches
    that output). A grad_lse runs the same kernels with Δ − dLSE; `rng` is
    a dropout forward's (seed, offset), whose mask the kernels regenerate."""
    kernel = plan.backward_kernel()
    grad_out = torch.zeros_like(out) if grad_out is None else grad_out.contiguous()
    grad_lse_ptr = 0
    if grad_lse is not None:
        grad_lse = grad_lse.to(torch.float32).contiguous()
        grad_lse_ptr = grad_lse.data_ptr()
    b, sq, sk = q.shape[0], q.shape[1], k.shape[1]
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    # Scratch the launch initializes itself: the f32 dQ accumulator, LSE in
    # base 2 and the row dot products (O(N), from torch's caching allocator).
    workspace = q.new_empty(max(kernel.workspace_bytes(b, sq, sk), 256), dtype=torch.uint8)
    kernel.launch_grad(grad_out.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                       lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), workspace.data_ptr(),
                       b, sq, sk, _raw_stream(plan.index), grad_lse_ptr,
                       0 if rng is None else rng.data_ptr())
    return dq, dk, dv


class _Attention(torch.autograd.Function):
    """The eager forward with its backward. Gradients reach q, k and v from
    both outputs: through O, and through the LSE (fa3.attention_grad's
    grad_lse) when the caller uses it, e.g. to merge partial attentions."""

    @staticmethod
    def forward(ctx, q, k, v, plan, rng):
        q, k, v, out, lse = _forward(plan, q, k, v, rng=rng)
        ctx.save_for_backward(q, k, v, out, lse, rng)
        ctx.plan = plan
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse, rng = ctx.saved_tensors
        if grad_out is None and grad_lse is None:
            return None, None, None, None, None
        dq, dk, dv = _backward(ctx.plan, grad_out, q, k, v, out, lse, grad_lse, rng)
        return dq, dk, dv, None, None


def _rounded_up(q, k, v, causal, softmax_scale, window_size, softcap, need_lse, pack_gqa, deterministic,
                dropout_p, rng):
    """fa3.attention at a head dim the kernels are not compiled for (or v's
    head dim != q's): q, k and v zero-padded to rounded_cuda_head_dim with
    F.pad (differentiable, and traced by torch.compile), the scale kept at
    the original head dim's. Zero columns leave q·kᵀ unchanged and give v's
    padding zero output columns, which are sliced away; the gradients of the
    padding are dropped by F.pad's backward. Costs one copy of q, k and v
    and the larger kernel's FLOPs."""
    _, _, d, dv = check_shapes(q.shape, k.shape, v.shape, cuda=False)
    causal, scale, window, softcap = check_options(causal, softmax_scale, window_size, softcap, d)
    _check_tensors(q, k, v)
    size = rounded_cuda_head_dim(d, dv)
    q, k, v = (F.pad(t, (0, size - t.shape[3])) for t in (q, k, v))
    out, lse = attention(q, k, v, causal, scale, window, softcap, need_lse, pack_gqa, deterministic, dropout_p,
                         rng)
    return out[..., :dv], lse


def attention(q, k, v, causal, softmax_scale, window_size, softcap, need_lse=True, pack_gqa=None,
              deterministic=False, dropout_p=0.0, rng=None):
    """(out, lse) of fa3.attention on torch CUDA tensors (bf16/f16); with
    `need_lse=False` and no autograd, lse is a scratch buffer the caller must
    not use. `dropout_p > 0` needs `rng`, the (seed, offset) int64 [2] on
    q's device (dropout_rng)."""
    if dropout_p and (rng is None or rng.device != q.device or rng.dtype != torch.int64 or rng.shape != (2,)):
        raise ValueError(f"dropout needs rng, the (seed, offset) int64 tensor of shape (2,) on {q.device}")
    if torch.compiler.is_compiling():
        if q.dim() == 4 and k.dim() == 4 and v.dim() == 4 and not has_cuda_kernel(q.shape[3], v.shape[3]):
            return _rounded_up(q, k, v, causal, softmax_scale, window_size, softcap, need_lse, pack_gqa,
                               deterministic, dropout_p, rng)
        hq, hkv, d, _ = check_shapes(q.shape, k.shape, v.shape, cuda=True)
        causal, scale, window, softcap = check_options(causal, softmax_scale, window_size, softcap, d)
        _check_tensors(q, k, v)
        # Checked here, decided per launch by the plan.
        resolve_pack_gqa(pack_gqa, hq, hkv, False, lambda: False)
        if not isinstance(deterministic, bool):
            raise TypeError(f"deterministic must be a bool, got {type(deterministic).__name__}")
        return torch.ops.fa3.attention_fwd(q, k, v, causal, scale, window[0], window[1], softcap, pack_gqa,
                                           deterministic, float(dropout_p), rng if dropout_p else None)
    # _plan, with the head dims that round up to a compiled one on a miss.
    key, plan = _cached_plan(q, k, v, causal, softmax_scale, window_size, softcap, pack_gqa, deterministic,
                             dropout_p)
    if plan is None:
        if q.dim() == 4 and k.dim() == 4 and v.dim() == 4 and not has_cuda_kernel(q.shape[3], v.shape[3]):
            return _rounded_up(q, k, v, causal, softmax_scale, window_size, softcap, need_lse, pack_gqa,
                               deterministic, dropout_p, rng)
        plan = _new_plan(key, q, k, v, causal, softmax_scale, window_size, softcap, pack_gqa, deterministic,
                         dropout_p)
    # is_contiguous() reads a flag torch keeps: for dense inputs it costs a
    # third of the three stride(-1) calls it spares.
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()) and (
            (q.stride(-1) != 1 and q.shape[-1] > 1) or (k.stride(-1) != 1 and k.shape[-1] > 1)
            or (v.stride(-1) != 1 and v.shape[-1] > 1)):
        _check_tensors(q, k, v)  # raises, naming the tensor
    rng = rng if dropout_p else None
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _Attention.apply(q, k, v, plan, rng)
    return _forward(plan, q, k, v, need_lse, rng)[3:]


# --- torch.compile: the same launches as custom ops --------------------------

def _op_plan(q, k, v, causal, scale, window_left, window_right, softcap, pack_gqa, deterministic, dropout_p):
    return _plan(q, k, v, causal, scale, (window_left, window_right), softcap, pack_gqa, deterministic, dropout_p)


@torch.library.custom_op("fa3::attention_fwd", mutates_args=())
def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                  window_left: int, window_right: int, softcap: float,
                  pack_gqa: Optional[bool] = None, deterministic: bool = False, dropout_p: float = 0.0,
                  rng: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    plan = _op_plan(q, k, v, causal, scale, window_left, window_right, softcap, pack_gqa, deterministic, dropout_p)
    return _forward(plan, q, k, v, rng=rng)[3:]


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, causal, scale, window_left, window_right, softcap, pack_gqa=None,
                        deterministic=False, dropout_p=0.0, rng=None):
    b, sq, hq, _ = q.shape
    return (q.new_empty((b, sq, hq, v.shape[3])),
            q.new_empty((b, hq, sq), dtype=torch.float32))


@torch.library.custom_op("fa3::attention_bwd", mutates_args=())
def attention_bwd(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  out: torch.Tensor, lse: torch.Tensor, grad_lse: torch.Tensor, causal: bool, scale: float,
                  window_left: int, window_right: int, softcap: float,
                  pack_gqa: Optional[bool] = None,
                  deterministic: bool = False, dropout_p: float = 0.0,
                  rng: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    plan = _op_plan(q, k, v, causal, scale, window_left, window_right, softcap, pack_gqa, deterministic, dropout_p)
    q, k, v, out, lse = (t.contiguous() for t in (q, k, v, out, lse))
    return _backward(plan, grad_out, q, k, v, out, lse, grad_lse, rng)


@attention_bwd.register_fake
def _attention_bwd_fake(grad_out, q, k, v, out, lse, grad_lse, causal, scale, window_left, window_right,
                        softcap, pack_gqa=None, deterministic=False, dropout_p=0.0, rng=None):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, window_left, window_right, softcap, pack_gqa, deterministic, dropout_p, rng = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.rng = rng
    ctx.options = (causal, scale, window_left, window_right, softcap, pack_gqa, deterministic, dropout_p)


def _op_backward(ctx, grad_out, grad_lse):
    # Both outputs' gradients, as in _Attention (torch.compile materializes
    # an unused one as zeros: a zero dLSE leaves Δ as it is).
    q, k, v, out, lse = ctx.saved_tensors
    grad_out = torch.zeros_like(out) if grad_out is None else grad_out
    grad_lse = torch.zeros_like(lse) if grad_lse is None else grad_lse
    dq, dk, dv = torch.ops.fa3.attention_bwd(grad_out, q, k, v, out, lse, grad_lse, *ctx.options, ctx.rng)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None


attention_fwd.register_autograd(_op_backward, setup_context=_setup_context)


# --- FP8 ----------------------------------------------------------------------

@torch.library.custom_op("fa3::attention_fp8_fwd", mutates_args=())
def attention_fp8_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_descale: torch.Tensor,
                      k_descale: torch.Tensor, v_descale: torch.Tensor, causal: bool, scale: float,
                      window_left: int, window_right: int, softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The FP8 forward (no autograd: e4m3 tensors carry no gradient). The
    launch first writes V' (V transposed, keys permuted) into a workspace."""
    spec = _make_spec(q, k, v, causal, scale, (window_left, window_right), softcap)
    # The length bucket's kernel (the cost model's persistent grid depends
    # on the key length).
    kernel = _jit.get(spec, f"cuda:{q.device.index}", "fwd",
                      schedule=_jit.forward_schedule(spec, q.shape[1], k.shape[1]))
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    q_descale, k_descale, v_descale = (d.contiguous().float() for d in (q_descale, k_descale, v_descale))
    b, sq, hq, _ = q.shape
    sk = k.shape[1]
    out = torch.empty((b, sq, hq, v.shape[3]), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    workspace = torch.empty(max(kernel.forward_workspace_bytes(b, sq, sk), 256), dtype=torch.uint8, device=q.device)
    kernel.launch_fp8(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                      q_descale.data_ptr(), k_descale.data_ptr(), v_descale.data_ptr(), workspace.data_ptr(),
                      b, sq, sk, _raw_stream(q.device.index))
    return out, lse


@attention_fp8_fwd.register_fake
def _attention_fp8_fwd_fake(q, k, v, q_descale, k_descale, v_descale, causal, scale, window_left, window_right,
                            softcap):
    b, sq, hq, _ = q.shape
    return (q.new_empty((b, sq, hq, v.shape[3]), dtype=torch.bfloat16),
            q.new_empty((b, hq, sq), dtype=torch.float32))


def _quantize(x, num_groups, hadamard_seed):
    """fa3.quantize of x [B, S, H, D] on its device through the compiler's
    kernels: (e4m3 tensor, f32 descales [B, G])."""
    x = x.contiguous()
    b, s, h, d = x.shape
    source = _jit.quantize_mlir(_QUANTIZE_DTYPES[x.dtype], h, num_groups, d, hadamard_seed)
    kernel = _jit.get_mlir(source, "quantize", f"cuda:{x.device.index}", "quantize")
    out = torch.empty(x.shape, dtype=FP8, device=x.device)
    descale = torch.empty((b, num_groups), dtype=torch.float32, device=x.device)
    workspace = torch.empty(max(kernel.workspace_bytes(b), 4), dtype=torch.uint8, device=x.device)
    kernel.launch(x.data_ptr(), out.data_ptr(), descale.data_ptr(), workspace.data_ptr(), b, s,
                  _raw_stream(x.device.index))
    return out, descale


def quantize_for_fp8(q, k, v, hadamard):
    """(q8, k8, v8, (q_descale, k_descale, v_descale)) for fa3's FP8 kernels,
    computed by the compiler's fa3.quantize kernels: FA3's per-(batch, kv
    head) descales (amax / 448) and, with `hadamard`, q and k multiplied by
    the random-sign Hadamard matrix of seed 0 first (fa3-cast-fp8's
    #fa3.fp8<hadamard = true>, so the GPU and CPU paths agree)."""
    if (q.requires_grad or k.requires_grad or v.requires_grad) and torch.is_grad_enabled():
        raise ValueError("fp8=True is forward-only (the FP8 kernels have no backward); "
                         "call it under torch.no_grad() or on tensors that do not require grad")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}; fp8=True runs on CUDA tensors")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; fa3 runs all three on one device")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {q.dtype}; they must match")
    kv_heads = k.shape[2]
    seed = 0 if hadamard else None
    (q8, qd), (k8, kd), (v8, vd) = (_quantize(x, kv_heads, s) for x, s in ((q, seed), (k, seed), (v, None)))
    return q8, k8, v8, (qd, kd, vd)
