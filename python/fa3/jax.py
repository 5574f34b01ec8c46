"""fa3 from JAX: `fa3.jax.attention`, an XLA FFI custom call over fa3's C API.

    import jax, jax.numpy as jnp
    import fa3.jax
    out = jax.jit(fa3.jax.attention, static_argnames="causal")(q, k, v, causal=True)
    dq, dk, dv = jax.grad(lambda q, k, v: fa3.jax.attention(q, k, v).sum(), (0, 1, 2))(q, k, v)

The layout is FlashAttention's and `jax.nn.dot_product_attention`'s:
q [batch, seqlen_q, num_heads, head_dim], k/v [batch, seqlen_k,
num_kv_heads, head_dim(_v)]. The call lowers to the custom-call targets
`fa3_attention_fwd` and `fa3_attention_bwd` (python/src/fa3_jax_ffi.cpp),
registered for two platforms:

* "CUDA" (jax's GPU backend): fa3's sm_90a kernels (bf16/f16, head dims 64,
  128, 256), launched on XLA's stream; the backward's workspace is an extra
  result of its call, sized at trace time by the backward kernel compiled
  to PTX.
* "cpu": fa3's CPU pipeline on host buffers (f32/f16/bf16, any head dim that
  is a multiple of 8 up to 256).

The MLIR function of the specialization is an attribute of the call, and
each handler compiles it on first use (fa3's kernel cache on disk serves
later processes). `jax.grad`/`jax.vjp` run fa3.attention_grad through
`jax.custom_vjp`, through the output and through the LSE (`return_lse=True`:
its gradient runs as fa3.attention_grad's grad_lse), so attentions merged by
their LSE differentiate correctly.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import _jit, _spec

_DTYPES = {np.dtype(jnp.float32): "f32", np.dtype(jnp.float16): "f16", np.dtype(jnp.bfloat16): "bf16"}


def _register():
    try:
        from . import _fa3_jax
    except ImportError as e:  # pragma: no cover - exercised where the module is missing
        raise ImportError(
            "fa3._fa3_jax (fa3's XLA FFI handlers) is not built: it is built with fa3._fa3 by "
            "`bash scripts/build.sh` (or `python setup.py build_ext --inplace`) when jax is "
            f"installed in that Python ({e})") from e
    for name, handlers in _fa3_jax.registrations().items():
        for platform, capsule in handlers.items():
            jax.ffi.register_ffi_target(name, capsule, platform=platform)


_register()


def _platform(x):
    """'gpu' or 'cpu': the platform the call will run on, from a concrete
    array's device, else (under jit) jax's default backend."""
    if not isinstance(x, jax.core.Tracer):
        devices = getattr(x, "devices", None)
        if devices is not None:
            return next(iter(devices())).platform
    return jax.default_backend()


def _spec_for(q, k, v, causal, softmax_scale, window_size, softcap):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"{name} must be a jax array, got {type(x).__name__}")
    dtype = np.dtype(q.dtype)
    for name, x in (("k", k), ("v", v)):
        if np.dtype(x.dtype) != dtype:
            raise TypeError(f"q, k and v must share a dtype: q is {dtype}, {name} is {np.dtype(x.dtype)}")
    platform = _platform(q)
    if platform not in ("gpu", "cpu"):
        raise ValueError(f"fa3.jax runs on jax's 'gpu' (CUDA) and 'cpu' platforms, not {platform!r}")
    cuda = platform == "gpu"
    if dtype not in _DTYPES or (cuda and dtype == np.float32):
        allowed = "bfloat16 or float16" if cuda else "float32, float16 or bfloat16"
        raise TypeError(f"q, k and v must be {allowed} on {platform}, got {dtype}")
    hq, hkv, d, dv = _spec.check_shapes(q.shape, k.shape, v.shape, cuda=cuda)
    causal, scale, window, softcap = _spec.check_options(causal, softmax_scale, window_size, softcap, d)
    spec = _spec.AttentionSpec(_DTYPES[dtype], hq, hkv, d, dv, causal, scale, window, softcap)
    schedule = _jit.forward_schedule(spec, q.shape[1], k.shape[1]) if cuda else None
    return spec, cuda, schedule


def _forward(q, k, v, spec, schedule):
    b, sq, hq, _ = q.shape
    out_types = (jax.ShapeDtypeStruct((b, sq, hq, spec.head_dim_v), q.dtype),
                 jax.ShapeDtypeStruct((b, hq, sq), jnp.float32))
    call = jax.ffi.ffi_call("fa3_attention_fwd", out_types)
    return call(q, k, v, source=spec.forward_mlir(schedule))


def _workspace_bytes(spec, q, k, cuda):
    """The backward workspace the CUDA handler needs, plus 256 bytes for its
    alignment (asked of the backward kernel compiled to PTX, which needs no
    GPU; the handler checks it). The CPU handler needs none."""
    if not cuda:
        return 0
    kernel = _jit.get(spec, "ptx", "bwd")
    return kernel.workspace_bytes(q.shape[0], q.shape[1], k.shape[1]) + 256


def _backward(do, q, k, v, o, lse, dlse, spec, cuda):
    out_types = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v)) + (
        jax.ShapeDtypeStruct((_workspace_bytes(spec, q, k, cuda),), jnp.uint8),)
    call = jax.ffi.ffi_call("fa3_attention_bwd", out_types)
    dq, dk, dv, _ = call(do, q, k, v, o, lse, dlse, source=spec.backward_mlir(grad_lse=True))
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _attention(q, k, v, spec, cuda, schedule):
    return _forward(q, k, v, spec, schedule)


def _attention_fwd(q, k, v, spec, cuda, schedule):
    # symbolic_zeros=True: the primals arrive wrapped (value, perturbed).
    q, k, v = q.value, k.value, v.value
    o, lse = _forward(q, k, v, spec, schedule)
    return (o, lse), (q, k, v, o, lse)


def _attention_bwd(spec, cuda, schedule, residuals, cotangents):
    q, k, v, o, lse = residuals
    do, dlse = cotangents
    zero = jax.custom_derivatives.SymbolicZero
    if isinstance(do, zero) and isinstance(dlse, zero):
        return tuple(jnp.zeros(x.shape, x.dtype) for x in (q, k, v))
    # An output nothing differentiates arrives as a symbolic zero: a zero
    # dO adds nothing, a zero dLSE leaves the backward's Δ as it is.
    do = jnp.zeros(o.shape, o.dtype) if isinstance(do, zero) else do.astype(o.dtype)
    dlse = jnp.zeros(lse.shape, jnp.float32) if isinstance(dlse, zero) else dlse.astype(jnp.float32)
    return _backward(do, q, k, v, o, lse, dlse, spec, cuda)


_attention.defvjp(_attention_fwd, _attention_bwd, symbolic_zeros=True)


def attention(q, k, v, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
              return_lse=False):
    """Scaled dot-product attention through fa3, as `fa3.attention` for jax
    arrays (the options mean the same: `causal` aligns the diagonal
    bottom-right when seqlen_q != seqlen_k, `window_size=(left, right)`,
    `softcap`, `softmax_scale` defaulting to 1/sqrt(head_dim)).

    Jit-able (the options are Python values fixed at trace time: pass them as
    static arguments) and differentiable in q, k and v through both outputs.
    Returns `out`
    [batch, seqlen_q, num_heads, head_dim_v] in the inputs' dtype, or
    `(out, lse)` with the natural-log LSE [batch, num_heads, seqlen_q]
    (float32, -inf for rows that see no key).
    """
    if _platform(q) == "gpu" and _needs_rounding(q, k, v):
        return _rounded_up(q, k, v, causal, softmax_scale, window_size, softcap, return_lse)
    spec, cuda, schedule = _spec_for(q, k, v, causal, softmax_scale, window_size, softcap)
    o, lse = _attention(q, k, v, spec, cuda, schedule)
    return (o, lse) if return_lse else o


def _needs_rounding(q, k, v):
    """Whether q, k and v (4-d arrays; anything else is left to the
    checks of _spec_for) have a head dim the CUDA kernels are not compiled
    for, or v's differs from q's."""
    if not all(len(getattr(x, "shape", ())) == 4 for x in (q, k, v)):
        return False
    return not _spec.has_cuda_kernel(q.shape[3], v.shape[3])


def _rounded_up(q, k, v, causal, softmax_scale, window_size, softcap, return_lse):
    """As fa3.attention on torch: a head dim the CUDA kernels are not
    compiled for (or v's != q's) runs at the next compiled one, q, k and v
    zero-padded (jnp.pad, differentiable; the padding's gradient is dropped)
    and the scale kept at the original head dim's; v's padded output columns
    are sliced away."""
    _, _, d, dv = _spec.check_shapes(q.shape, k.shape, v.shape, cuda=False)
    causal, scale, window, softcap = _spec.check_options(causal, softmax_scale, window_size, softcap, d)
    size = _spec.rounded_cuda_head_dim(d, dv)
    q, k, v = (jnp.pad(x, ((0, 0), (0, 0), (0, 0), (0, size - x.shape[3]))) for x in (q, k, v))
    o, lse = attention(q, k, v, causal, scale, window, softcap, return_lse=True)
    o = o[..., :dv]
    return (o, lse) if return_lse else o


__all__ = ["attention"]
