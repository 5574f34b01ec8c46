"""fa3's Python API: `attention` for numpy arrays (the CPU pipeline) and
torch CUDA tensors (the Hopper kernels, differentiable), and `compile` for
the compiled kernels themselves."""

import sys

import numpy as np

from . import _jit
from ._spec import (CPU_BLOCK_M, MLIR_TYPES, AttentionSpec, check_dropout, check_last_dim_contiguous,
                    check_options, check_shapes, resolve_pack_gqa)


def _is_torch(x):
    torch = sys.modules.get("torch")  # a torch tensor implies torch is imported
    return torch is not None and isinstance(x, torch.Tensor)


def _numpy_dtype_name(a):
    name = a.dtype.name
    return {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}.get(name)


_torch_path = None


def _torch_module():
    """fa3._torch, imported on first use (numpy users need no torch) and then
    held, so a cached call does not pay for an import statement."""
    global _torch_path
    if _torch_path is None:
        from . import _torch

        _torch_path = _torch
    return _torch_path


def attention(q, k, v, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
              return_lse=False, q_descale=None, k_descale=None, v_descale=None, fp8=False, hadamard=False,
              pack_gqa=None, deterministic=False, dropout_p=0.0, dropout_seed=None, dropout_offset=0):
    """Scaled dot-product attention, FlashAttention's `flash_attn_func` layout.

    q: (batch, seqlen_q, num_heads, head_dim); k: (batch, seqlen_k,
    num_kv_heads, head_dim); v: (batch, seqlen_k, num_kv_heads, head_dim_v).
    GQA/MQA when num_heads is a multiple of num_kv_heads. `causal` aligns the
    diagonal to the bottom-right corner when seqlen_q != seqlen_k;
    `window_size=(left, right)` limits each query to keys within `left`
    before and `right` after its diagonal (-1: unbounded); `softcap > 0`
    applies `softcap * tanh(s / softcap)` to the scaled scores;
    `softmax_scale` defaults to 1/sqrt(head_dim).

    * torch CUDA tensors (bf16/f16, on any `cuda:N`, all three on one
      device): the sm_90a kernels, loaded on that device, on its current
      stream; differentiable (the backward runs fa3.attention_grad),
      traceable by torch.compile (the op is `torch.ops.fa3.attention_fwd`)
      and capturable in CUDA graphs. A repeated call of the same shapes and
      options reuses a cached plan (no re-checking, no recompiling).
    * torch CUDA tensors of torch.float8_e4m3fn with `q_descale`,
      `k_descale`, `v_descale` (float32, (batch, num_kv_heads)): the FP8
      kernels (head dims 64, 128 and 256); the attention of `q * q_descale`,
      `k * k_descale`, `v * v_descale`; bf16 output; forward only.
    * `fp8=True` with bf16/f16/f32 CUDA tensors: fa3 quantizes them itself (one
      descale per (batch, kv head): amax / 448) and runs the FP8 kernels;
      `hadamard=True` first multiplies q and k by the same random-sign
      Hadamard matrix (O(d log d), "incoherent processing": it leaves q kᵀ
      unchanged and spreads outliers across the head dim before the cast).
      Both run as the compiler's fa3.quantize kernels (what fa3-cast-fp8
      emits), so the GPU and the CPU quantize alike.
    * numpy arrays (float32, float16 or ml_dtypes.bfloat16): the CPU pipeline;
      returns numpy arrays. With `fp8=True` (and optionally `hadamard=True`)
      the inputs are rounded to bf16 and the compiler quantizes them
      (`fa3-cast-fp8`: the same quantization, Hadamard signs and e4m3
      rounding of P as the GPU kernels); the output is bf16.

    The last dim of every input must be contiguous; other strides are
    accepted and the input is copied to a dense layout first (one read and
    one write of it). Returns `out` (batch, seqlen_q, num_heads, head_dim_v)
    or `(out, lse)` with the natural-log LSE (batch, num_heads, seqlen_q),
    float32, -inf for rows that see no key. On torch CUDA tensors the LSE is
    differentiable too (its gradient runs through fa3.attention_grad's
    grad_lse): partial attentions merged by their LSE train correctly.

    `pack_gqa` (FlashAttention-3's): with GQA, put the num_heads /
    num_kv_heads query heads of one kv head into one query tile, so short
    queries (decode: seqlen_q = 1) fill the tile and each K/V block is read
    once per group. None (default): fa3 decides per call from the shapes
    (FlashAttention-3's rule); True needs the group to divide 64 and 16-bit
    inputs (ValueError otherwise); False: never. The result is the same.

    `deterministic=True` (torch CUDA tensors): the backward's dq, dk and dv
    are bit-identical from run to run (the key blocks add their dq shares
    in a fixed order instead of as they finish; slower, see
    docs/Performance.md). The forward, and the CPU backward, always are.

    `dropout_p` (FlashAttention-2's): each attention probability is dropped
    with probability `dropout_p` and the kept ones scaled by 1 / (1 -
    dropout_p); the LSE is that of the softmax before dropout. The mask is
    Philox4x32-10 of (`dropout_seed`, `dropout_offset`) and the position
    (batch, head, query, key) — `fa3.reference.dropout_mask` computes the
    same bits on the CPU and the GPU — so the backward regenerates it
    instead of storing it (on torch tensors autograd does; on numpy arrays
    `compile(..., backward=True, dropout_p=...)` with the same seed and
    offset). numpy arrays need `dropout_seed`; on torch tensors a missing
    seed is drawn from the tensors' CUDA generator (torch.manual_seed
    reproduces it; in a captured CUDA graph, anew by every replay), offset 0. Not with fp8, hadamard or pack_gqa=True.
    """
    torch = sys.modules.get("torch")
    if (torch is not None and type(q) is torch.Tensor and type(k) is torch.Tensor and type(v) is torch.Tensor
            and not fp8 and not hadamard and q_descale is None and k_descale is None and v_descale is None
            and (q.dtype is torch.bfloat16 or q.dtype is torch.float16) and return_lse.__class__ is bool
            and dropout_p == 0.0 and dropout_seed is None):
        # The cached-plan path of bf16/f16 torch tensors (fa3._torch).
        out, lse = _torch_module().attention(q, k, v, causal, softmax_scale, window_size, softcap,
                                             need_lse=return_lse, pack_gqa=pack_gqa, deterministic=deterministic)
        return (out, lse) if return_lse else out
    names = ("q", "k", "v")
    tensors = (q, k, v)
    kinds = ["torch" if _is_torch(t) else "numpy" if isinstance(t, np.ndarray) else None for t in tensors]
    for name, t, kind in zip(names, tensors, kinds):
        if kind is None:
            raise TypeError(f"{name} must be a torch.Tensor (CUDA) or a numpy.ndarray (CPU), "
                            f"got {type(t).__name__}")
    if len(set(kinds)) != 1:
        raise TypeError("q, k and v must all be torch tensors or all numpy arrays, got "
                        + ", ".join(f"{n}: {k_}" for n, k_ in zip(names, kinds)))
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__}")
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool, got {type(deterministic).__name__}")
    cuda = kinds[0] == "torch"
    # (cuda=False: the torch path rounds head dims up, FP8 checks its own.)
    hq, hkv, d, dv = check_shapes(q.shape, k.shape, v.shape, cuda=False)
    causal, scale, window, softcap = check_options(causal, softmax_scale, window_size, softcap, d)
    dropout, rng = check_dropout(dropout_p, dropout_seed, dropout_offset, seed_required=not cuda)
    if dropout and (fp8 or hadamard or pack_gqa):
        raise ValueError("dropout_p > 0 does not combine with fp8, hadamard or pack_gqa (its mask is defined "
                         "per query head and row of a 16- or 32-bit attention)")
    descales = (q_descale, k_descale, v_descale)
    for name, flag in (("fp8", fp8), ("hadamard", hadamard)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    if hadamard and not fp8:
        raise ValueError("hadamard=True applies to fp8=True (it conditions q and k for the e4m3 cast)")
    is_fp8 = fp8 or (cuda and str(q.dtype) == "torch.float8_e4m3fn")
    # Checked for every path; the CPU decides it here, CUDA per launch.
    pack = resolve_pack_gqa(pack_gqa, hq, hkv, is_fp8,
                            lambda: _jit._module().should_pack_gqa(q.shape[1], hq // hkv, CPU_BLOCK_M))
    pack = pack and not dropout  # dropout's mask is per query head: never packed
    if fp8:
        if any(x is not None for x in descales):
            raise ValueError("fp8=True computes the descales itself; do not pass q/k/v_descale")
        if hadamard and d & (d - 1):
            raise ValueError(f"hadamard=True needs a power-of-two head dim, got {d}")
        if not cuda:
            return _attention_numpy(q, k, v, hq, hkv, d, dv, causal, scale, window, softcap, return_lse,
                                    cast_fp8=True, hadamard=hadamard)
        if str(q.dtype) not in ("torch.bfloat16", "torch.float16", "torch.float32"):
            raise TypeError("fp8=True quantizes bf16/f16/f32 torch CUDA tensors; pass torch.float8_e4m3fn "
                            "tensors with descales to use your own quantization")
        from ._torch import quantize_for_fp8

        q, k, v, descales = quantize_for_fp8(q, k, v, hadamard)
    if cuda and str(q.dtype) == "torch.float8_e4m3fn":
        return _attention_fp8(q, k, v, descales, hkv, d, causal, scale, window, softcap, return_lse)
    for name, x in zip(("q_descale", "k_descale", "v_descale"), descales):
        if x is not None:
            raise ValueError(f"{name} is only for FP8 inputs (torch.float8_e4m3fn q, k, v)")
    if cuda:
        if dropout:
            torch_path = _torch_module()
            out, lse = torch_path.attention(q, k, v, causal, scale, window, softcap, pack_gqa=False,
                                            deterministic=deterministic, dropout_p=dropout,
                                            rng=torch_path.dropout_rng(q.device, rng))
            return (out, lse) if return_lse else out
        return _attention_torch(q, k, v, causal, scale, window, softcap, return_lse, pack_gqa, deterministic)
    return _attention_numpy(q, k, v, hq, hkv, d, dv, causal, scale, window, softcap, return_lse,
                            pack_gqa=pack, dropout=dropout, rng=rng)


def _attention_torch(q, k, v, causal, scale, window, softcap, return_lse, pack_gqa, deterministic):
    out, lse = _torch_module().attention(q, k, v, causal, scale, window, softcap, pack_gqa=pack_gqa,
                                         deterministic=deterministic)
    return (out, lse) if return_lse else out


def _attention_fp8(q, k, v, descales, hkv, d, causal, scale, window, softcap, return_lse):
    import torch

    from ._spec import FP8_HEAD_DIMS
    from ._torch import FP8

    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}; the FP8 kernels run on CUDA")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; fa3 runs all three on one device")
        if t.dtype != FP8:
            raise TypeError(f"{name} has dtype {t.dtype} but q has torch.float8_e4m3fn; they must match")
        check_last_dim_contiguous(name, t)
    if d not in FP8_HEAD_DIMS or v.shape[3] != d:
        raise ValueError(f"FP8 head_dim must be one of {FP8_HEAD_DIMS} with v's equal to q's, got {d} and {v.shape[3]}")
    for name, x in zip(("q_descale", "k_descale", "v_descale"), descales):
        if x is None:
            raise ValueError(f"FP8 inputs need {name} (float32, shape (batch, num_kv_heads))")
        if not _is_torch(x) or x.device.type != "cuda" or x.dtype != torch.float32:
            raise TypeError(f"{name} must be a float32 CUDA tensor, got "
                            f"{getattr(x, 'dtype', type(x).__name__)} on {getattr(x, 'device', '?')}")
        if x.device != q.device:
            raise ValueError(f"{name} is on {x.device} but q is on {q.device}")
        if tuple(x.shape) != (q.shape[0], hkv):
            raise ValueError(f"{name} must have shape (batch, num_kv_heads) = {(q.shape[0], hkv)}, got {tuple(x.shape)}")
    out, lse = torch.ops.fa3.attention_fp8_fwd(q, k, v, *descales, causal, scale, window[0], window[1], softcap)
    return (out, lse) if return_lse else out


def _attention_numpy(q, k, v, hq, hkv, d, dv, causal, scale, window, softcap, return_lse,
                     cast_fp8=False, hadamard=False, pack_gqa=False, dropout=0.0, rng=None):
    dtype = _numpy_dtype_name(q)
    for name, a in (("q", q), ("k", k), ("v", v)):
        if _numpy_dtype_name(a) is None:
            raise TypeError(f"{name} has dtype {a.dtype}; fa3 on the CPU takes float32, float16 or "
                            "ml_dtypes.bfloat16")
        if a.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {a.dtype} but q has {q.dtype}; they must match")
        check_last_dim_contiguous(name, a)
    if cast_fp8:
        # The compiler quantizes bf16 inputs (fa3-cast-fp8): round to bf16 first.
        import ml_dtypes

        q, k, v = (a.astype(ml_dtypes.bfloat16) for a in (q, k, v))
        dtype = "bf16"
    spec = AttentionSpec(dtype=dtype, num_heads=hq, num_kv_heads=hkv, head_dim=d, head_dim_v=dv,
                         causal=causal, scale=scale, window=window, softcap=softcap,
                         cast_fp8=cast_fp8, hadamard=hadamard, pack_gqa=pack_gqa, dropout=dropout)
    fn = _jit.get(spec, "cpu", "fwd")
    inputs = [np.ascontiguousarray(a) for a in (q, k, v)] + ([rng] if dropout else [])
    out, lse = fn.run(inputs)
    return (out, lse) if return_lse else out


class Kernel:
    """A compiled attention (see `compile` and `compile_mlir`). `mlir` is the
    function compiled; on CUDA, `name` and `ptx` are the kernel's and
    `device` the "cuda:N" it is loaded on; `cache_hit` says whether it came
    from the on-disk cache and `compile_ms` how long getting it took."""

    def __init__(self, mlir, function, device, backward, block_m, block_n):
        self.mlir = mlir
        self.function = function
        self.device = _jit.device_key(device)
        self.backward = backward
        self._torch_device = None  # torch.device(self.device), made on the first CUDA launch
        self._impl = _jit.get_mlir(mlir, function, self.device, "bwd" if backward else "fwd", block_m, block_n)

    @property
    def compile_ms(self):
        return self._impl.compile_ms

    @property
    def name(self):
        return getattr(self._impl, "name", self.function)

    @property
    def ptx(self):
        if self.device == "cpu":
            raise ValueError("a CPU kernel has no PTX; compile with device='cuda' or device='ptx'")
        return self._impl.ptx

    @property
    def cache_hit(self):
        return getattr(self._impl, "cache_hit", False)

    def _cuda_args(self, names, tensors, method):
        """Checks the tensors of a launch; returns the raw current stream of
        the kernel's device. Per call this is a few type and attribute tests
        (a torch.device compared by value, no Stream object built): the
        launch_into path is meant to cost little more than the C launch."""
        if self.device in ("cpu", "ptx"):
            raise ValueError(f"{method} runs a kernel compiled with device='cuda', this one is {self.device!r}")
        torch_device = self._torch_device
        if torch_device is None:
            import torch

            torch_device = self._torch_device = torch.device(self.device)
        tensor_type = sys.modules["torch"].Tensor  # imported: torch_device exists
        for name, t in zip(names, tensors):
            if not isinstance(t, tensor_type) or t.device != torch_device or not t.is_contiguous():
                raise ValueError(f"{name} must be a contiguous torch tensor on {self.device} (the kernel's "
                                 f"device), got {'a ' + type(t).__name__ if not _is_torch(t) else t.device}")
        return _torch_module()._raw_stream(torch_device.index)

    def launch_into(self, q, k, v, out, lse, rng=None):
        """Forward into preallocated outputs on the current stream: q, k, v
        [B, S, H, D], out [B, Sq, Hq, Dv] and lse [B, Hq, Sq] float32, all
        contiguous on the kernel's device; `rng` (a kernel compiled with
        dropout): the int64 (seed, offset) tensor of shape (2,) there. Shapes
        are the caller's to get right (the C API checks sizes only); the
        lowest dispatch cost fa3 offers (bench/bench_dispatch.py measures
        it)."""
        if self.backward:
            raise ValueError("launch_into runs a forward; use launch_grad_into for a backward kernel")
        names, tensors = ("q", "k", "v", "out", "lse"), (q, k, v, out, lse)
        if rng is not None:
            names, tensors = names + ("rng",), tensors + (rng,)
        stream = self._cuda_args(names, tensors, "launch_into")
        self._impl.launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                          q.shape[0], q.shape[1], k.shape[1], stream, 0 if rng is None else rng.data_ptr())

    def workspace_bytes(self, batch, seq_q, seq_k):
        """Bytes of device workspace one backward launch of these sizes needs
        (a "ptx" backward answers too, without a GPU)."""
        if not self.backward or self.device == "cpu":
            raise ValueError("workspace_bytes is a CUDA (or ptx) backward kernel's")
        return self._impl.workspace_bytes(batch, seq_q, seq_k)

    def launch_grad_into(self, grad_out, q, k, v, out, lse, dq, dk, dv, workspace=None, grad_lse=None, rng=None):
        """Backward into preallocated dq, dk, dv on the current stream (the
        forward's out and lse). `workspace`: a CUDA tensor of at least
        workspace_bytes() bytes at a 256-byte aligned address, whose contents
        the launch initializes (default: allocated here). `grad_lse`: the
        gradient reaching the LSE (float32 [B, Hq, Sq]), if any. `rng`: a
        dropout backward's (seed, offset), the forward's."""
        import torch

        if not self.backward:
            raise ValueError("launch_grad_into runs a backward; use launch_into for a forward kernel")
        names = ("grad_out", "q", "k", "v", "out", "lse", "dq", "dk", "dv")
        tensors = (grad_out, q, k, v, out, lse, dq, dk, dv)
        if grad_lse is not None:
            names, tensors = names + ("grad_lse",), tensors + (grad_lse,)
            if grad_lse.dtype != torch.float32 or tuple(grad_lse.shape) != tuple(lse.shape):
                raise ValueError(f"grad_lse must be float32 shaped like lse {tuple(lse.shape)}, got "
                                 f"{grad_lse.dtype} {tuple(grad_lse.shape)}")
        if rng is not None:
            names, tensors = names + ("rng",), tensors + (rng,)
        stream = self._cuda_args(names, tensors, "launch_grad_into")
        b, sq, sk = q.shape[0], q.shape[1], k.shape[1]
        need = self._impl.workspace_bytes(b, sq, sk)
        if workspace is None:
            workspace = torch.empty(max(need, 256), dtype=torch.uint8, device=q.device)
        elif workspace.numel() * workspace.element_size() < need:
            raise ValueError(f"workspace has {workspace.numel() * workspace.element_size()} bytes, "
                             f"the launch needs {need}")
        if workspace.data_ptr() % 256:
            raise ValueError("workspace's data_ptr() must be 256-byte aligned")
        self._impl.launch_grad(grad_out.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                               lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                               workspace.data_ptr(), b, sq, sk, stream,
                               0 if grad_lse is None else grad_lse.data_ptr(),
                               0 if rng is None else rng.data_ptr())

    def __call__(self, *tensors):
        """Forward: (q, k, v[, rng]) -> (out, lse). Backward: (grad_out, q,
        k, v, out, lse[, grad_lse][, rng]) -> (dq, dk, dv); `rng` (a kernel
        compiled with dropout_p > 0) is the int64 (seed, offset) of shape
        (2,). numpy arrays on the CPU (as many as the function's arguments),
        contiguous torch tensors on the kernel's CUDA device (launched on its
        current stream)."""
        if self.device == "cpu":
            want = (self._impl.num_inputs,)
        else:
            want = (6, 7, 8) if self.backward else (3, 4)
        if len(tensors) not in want:
            raise TypeError(f"this kernel takes {' or '.join(map(str, want))} tensors, got {len(tensors)}")
        if self.device == "ptx":
            raise ValueError("a kernel compiled with device='ptx' cannot run; compile with device='cuda'")
        if self.device == "cpu":
            if not all(isinstance(t, np.ndarray) for t in tensors):
                raise TypeError("a CPU kernel takes numpy arrays")
            return tuple(self._impl.run([np.ascontiguousarray(t) for t in tensors]))
        import torch

        # A last int64 tensor of shape (2,) is dropout's (seed, offset).
        rng = None
        if tensors[-1].dtype == torch.int64 and tuple(tensors[-1].shape) == (2,):
            tensors, rng = tensors[:-1], tensors[-1]
        if len(tensors) not in ((6, 7) if self.backward else (3,)):
            raise TypeError(f"this kernel takes {'dO, q, k, v, out, lse[, grad_lse]' if self.backward else 'q, k, v'}"
                            " and, compiled with dropout, a last int64 (seed, offset) tensor of shape (2,); got "
                            f"{len(tensors) + (rng is not None)} tensors")
        if not self.backward:
            q, k, v = tensors
            self._cuda_args(("q", "k", "v"), tensors, "calling the kernel")
            b, sq, hq, _ = q.shape
            out = torch.empty((b, sq, hq, v.shape[3]), dtype=q.dtype, device=q.device)
            lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
            self.launch_into(q, k, v, out, lse, rng=rng)
            return out, lse
        grad_out, q, k, v, out, lse = tensors[:6]
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        self.launch_grad_into(grad_out, q, k, v, out, lse, dq, dk, dv,
                              grad_lse=tensors[6] if len(tensors) == 7 else None, rng=rng)
        return dq, dk, dv


def compile_mlir(source, function, device="cuda", backward=False, block_m=0, block_n=0):
    """Compiles `function` of the MLIR `source` and returns a `Kernel`: for
    CUDA (or "ptx") a function whose body is one fa3.attention on its three
    arguments (four with dropout's rng) returning (O, LSE), or with
    `backward=True` one fa3.attention_grad on (dO, Q, K, V, O, LSE[, rng])
    returning (dQ, dK, dV) —
    the form any schedule attribute (`#fa3.schedule<...>`) can be tried in;
    on the CPU any fa3 function. Compile errors raise fa3.Error with the
    compiler's diagnostics."""
    for arg, value in (("source", source), ("function", function)):
        if not isinstance(value, str):
            raise TypeError(f"{arg} must be a str, got {type(value).__name__}")
    if not isinstance(backward, bool):
        raise TypeError(f"backward must be a bool, got {type(backward).__name__}")
    return Kernel(source, function, device, backward, block_m, block_n)


def compile(dtype, num_heads, head_dim, num_kv_heads=None, head_dim_v=None, causal=False,
            softmax_scale=None, window_size=(-1, -1), softcap=0.0, device="cuda", backward=False,
            block_m=0, block_n=0, grad_lse=False, dropout_p=0.0):
    """Compiles one attention specialization and returns a `Kernel`.

    `dtype`: "bf16", "f16" or "f32" (or the torch/numpy dtype). `device`:
    "cuda" (load on torch's current GPU), "cuda:N", "ptx" (sm_90a PTX only:
    needs no GPU) or "cpu".
    `backward=True` compiles fa3.attention_grad instead of the forward;
    with `grad_lse=True` its function takes a seventh argument, the gradient
    reaching the LSE (a CUDA backward takes it either way, as
    `launch_grad_into(..., grad_lse=...)`).
    `block_m`/`block_n` override the cost model's tiles (0: keep them).
    `dropout_p > 0` compiles attention dropout (see `attention`): the
    function takes one more, last argument, the int64 array [seed, offset]
    (CPU only for now: a CUDA compile raises fa3.Error with the compiler's
    diagnostic).
    Batch and sequence lengths stay dynamic."""
    name = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "half": "f16"}.get(
        str(dtype).replace("torch.", ""), str(dtype))
    if name not in MLIR_TYPES:
        raise TypeError(f"dtype must be one of bf16, f16, f32 (or the torch/numpy dtype), got {dtype!r}")
    device = _jit.device_key(device)
    if device != "cpu" and name == "f32":
        raise TypeError("dtype f32 runs on the CPU only; CUDA kernels take bf16 or f16")
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    head_dim_v = head_dim if head_dim_v is None else head_dim_v
    for arg, value in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim),
                       ("head_dim_v", head_dim_v), ("block_m", block_m), ("block_n", block_n)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TypeError(f"{arg} must be a non-negative int, got {value!r}")
    check_shapes((1, 1, num_heads, head_dim), (1, 1, num_kv_heads, head_dim), (1, 1, num_kv_heads, head_dim_v),
                 cuda=device != "cpu")
    causal, scale, window, softcap = check_options(causal, softmax_scale, window_size, softcap, head_dim)
    dropout, _ = check_dropout(dropout_p, 0, 0)
    spec = AttentionSpec(dtype=name, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                         head_dim_v=head_dim_v, causal=causal, scale=scale, window=window, softcap=softcap,
                         dropout=dropout)
    if not isinstance(grad_lse, bool) or (grad_lse and not backward):
        raise TypeError(f"grad_lse must be a bool, and True only with backward=True, got {grad_lse!r}")
    if backward:
        return Kernel(spec.backward_mlir(grad_lse), "attention_grad", device, True, block_m, block_n)
    return Kernel(spec.forward_mlir(), "attention", device, False, block_m, block_n)
