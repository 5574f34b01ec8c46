"""ctypes binding of fa3's C API (include/fa3-c/FA3.h): compile the
fa3.attention (Kernel) or fa3.attention_grad (GradKernel) of an MLIR function
for the current CUDA device and launch it on device buffers, in this process.
The bundle's libfa3.so is found through $FA3_LIB; torch tensors pass their
data_ptr() and the current stream."""

import ctypes
import os


class Fa3Error(RuntimeError):
    """A compile or launch failure, with fa3's message."""


def _load(path=None):
    path = path or os.environ.get("FA3_LIB")
    if not path:
        raise Fa3Error("set FA3_LIB to the path of libfa3.so (scripts/build-bundle.sh builds it)")
    lib = ctypes.CDLL(path)
    c_char_pp = ctypes.POINTER(ctypes.c_char_p)
    lib.fa3_version.restype = ctypes.c_char_p
    lib.fa3_compile_attention.restype = ctypes.c_void_p
    lib.fa3_compile_attention.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64,
                                          ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p)]
    lib.fa3_launch_attention.restype = ctypes.c_int
    lib.fa3_launch_attention.argtypes = [ctypes.c_void_p] + [ctypes.c_uint64] * 5 + [ctypes.c_int64] * 3 + \
        [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    if hasattr(lib, "fa3_compile_attention_grad"):  # absent from a forward-only libfa3.so
        lib.fa3_compile_attention_grad.restype = ctypes.c_void_p
        lib.fa3_compile_attention_grad.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64,
                                                   ctypes.c_int64, ctypes.POINTER(ctypes.c_int),
                                                   ctypes.POINTER(ctypes.c_void_p)]
        lib.fa3_attention_grad_workspace_size.restype = ctypes.c_int64
        lib.fa3_attention_grad_workspace_size.argtypes = [ctypes.c_void_p] + [ctypes.c_int64] * 3
        lib.fa3_launch_attention_grad.restype = ctypes.c_int
        lib.fa3_launch_attention_grad.argtypes = [ctypes.c_void_p] + [ctypes.c_uint64] * 10 + \
            [ctypes.c_int64] * 3 + [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.fa3_kernel_name.restype = ctypes.c_char_p
    lib.fa3_kernel_name.argtypes = [ctypes.c_void_p]
    lib.fa3_kernel_ptx.restype = ctypes.c_char_p
    lib.fa3_kernel_ptx.argtypes = [ctypes.c_void_p]
    lib.fa3_destroy_kernel.argtypes = [ctypes.c_void_p]
    lib.fa3_free_string.argtypes = [ctypes.c_void_p]
    del c_char_pp
    return lib


_LIB = None


def lib():
    global _LIB
    if _LIB is None:
        _LIB = _load()
    return _LIB


def _raise(err):
    message = ctypes.cast(err, ctypes.c_char_p).value.decode()
    lib().fa3_free_string(err)
    raise Fa3Error(message)


class Kernel:
    """One compiled forward kernel (fa3_compile_attention)."""

    def __init__(self, mlir_source, function, block_m=0, block_n=0):
        err = ctypes.c_void_p()
        hit = ctypes.c_int(0)
        handle = lib().fa3_compile_attention(mlir_source.encode(), function.encode(), block_m, block_n,
                                             ctypes.byref(hit), ctypes.byref(err))
        if not handle:
            _raise(err)
        self._handle = handle
        self.cache_hit = bool(hit.value)
        self.name = lib().fa3_kernel_name(handle).decode()

    @property
    def ptx(self):
        return lib().fa3_kernel_ptx(self._handle).decode()

    def launch(self, q, k, v, out, lse, stream=None):
        """q, k, v, out: contiguous CUDA tensors [B, S, H, D]; lse: [B, Hq, Sq]
        float32. `stream`: a torch.cuda.Stream (default: the current one)."""
        import torch

        if stream is None:
            stream = torch.cuda.current_stream()
        err = ctypes.c_void_p()
        rc = lib().fa3_launch_attention(self._handle, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                        lse.data_ptr(), q.shape[0], q.shape[1], k.shape[1],
                                        ctypes.c_void_p(stream.cuda_stream), ctypes.byref(err))
        if rc != 0:
            _raise(err)

    def __del__(self):
        if getattr(self, "_handle", None) and _LIB is not None:
            _LIB.fa3_destroy_kernel(self._handle)
            self._handle = None


def _check_contiguous(**tensors):
    for name, t in tensors.items():
        if not t.is_cuda or not t.is_contiguous():
            raise Fa3Error(f"{name} must be a contiguous CUDA tensor")


class GradKernel:
    """One compiled backward (fa3_compile_attention_grad): `function`'s body
    is one fa3.attention_grad on its six arguments (dO, Q, K, V, O, LSE)
    returning (dQ, dK, dV)."""

    def __init__(self, mlir_source, function, block_m=0, block_n=0):
        if not hasattr(lib(), "fa3_compile_attention_grad"):
            raise Fa3Error("this libfa3.so has no fa3_compile_attention_grad (a bundle without the backward)")
        err = ctypes.c_void_p()
        hit = ctypes.c_int(0)
        handle = lib().fa3_compile_attention_grad(mlir_source.encode(), function.encode(), block_m, block_n,
                                                  ctypes.byref(hit), ctypes.byref(err))
        if not handle:
            _raise(err)
        self._handle = handle
        self.cache_hit = bool(hit.value)
        self.name = lib().fa3_kernel_name(handle).decode()

    @property
    def ptx(self):
        return lib().fa3_kernel_ptx(self._handle).decode()

    def workspace_bytes(self, batch, seq_q, seq_k):
        """Bytes of device workspace one launch on these sizes needs."""
        n = lib().fa3_attention_grad_workspace_size(self._handle, batch, seq_q, seq_k)
        if n < 0:
            raise Fa3Error(f"fa3_attention_grad_workspace_size returned {n} for B={batch}, Sq={seq_q}, Sk={seq_k}")
        return n

    def launch(self, do, q, k, v, o, lse, dq, dk, dv, workspace=None, stream=None):
        """do, q, o, dq: contiguous CUDA tensors [B, Sq, Hq, D]; k, v, dk, dv:
        [B, Sk, Hkv, D]; lse: [B, Hq, Sq] float32 (O and LSE of the forward).
        `workspace`: a CUDA tensor of at least workspace_bytes() bytes with a
        256-byte aligned data_ptr() (default: a uint8 tensor allocated here on
        `stream`, so the caching allocator reuses it only after the launch).
        Its contents need no initialization (the launch's scratch).
        `stream`: a torch.cuda.Stream (default: the current one)."""
        import torch

        if stream is None:
            stream = torch.cuda.current_stream()
        _check_contiguous(do=do, q=q, k=k, v=v, o=o, lse=lse, dq=dq, dk=dk, dv=dv)
        batch, seq_q, seq_k = q.shape[0], q.shape[1], k.shape[1]
        need = self.workspace_bytes(batch, seq_q, seq_k)
        if workspace is None:
            with torch.cuda.stream(stream):
                workspace = torch.empty(need, dtype=torch.uint8, device=q.device)
        elif workspace.numel() * workspace.element_size() < need:
            raise Fa3Error(f"workspace has {workspace.numel() * workspace.element_size()} bytes, "
                           f"the launch needs {need}")
        ws_ptr = workspace.data_ptr() if need > 0 else 0
        if ws_ptr % 256:
            raise Fa3Error("the workspace pointer must be 256-byte aligned")
        err = ctypes.c_void_p()
        rc = lib().fa3_launch_attention_grad(self._handle, do.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                             o.data_ptr(), lse.data_ptr(), dq.data_ptr(), dk.data_ptr(),
                                             dv.data_ptr(), ws_ptr, batch, seq_q, seq_k,
                                             ctypes.c_void_p(stream.cuda_stream), ctypes.byref(err))
        if rc != 0:
            _raise(err)

    def __del__(self):
        if getattr(self, "_handle", None) and _LIB is not None:
            _LIB.fa3_destroy_kernel(self._handle)
            self._handle = None
