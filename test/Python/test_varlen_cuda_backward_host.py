"""The host side of the CUDA varlen backward (torch.ops.fa3.attention_varlen_cuda_bwd)
without a GPU: the op runs on CPU tensors with a stand-in for the compiled
kernel whose launch_varlen_grad reads its operands from the raw addresses it
is given (as the C API would) and writes the float64 reference's gradients
(fa3.reference.attention_varlen_grad of exactly what it read) to the
gradients' addresses. So what is checked is the plumbing: the spec compiled
(the head dim 192 zero-padded to 256, deterministic, seqused_k), which
tensor goes to which launch argument, their shapes and layouts, the
workspace size asked for, the grid's longest sequences (all of
cu_seqlens_k's keys, not seqused_k's), the padding sliced off, and the
shortcuts (no query or no key: zeros, no launch). bf16 gradients within
2^-8 of their largest entry of the reference on the unpadded inputs (the
stand-in rounds once)."""

import ctypes

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fa3 import _varlen_cuda, reference  # noqa: E402


class FakeKernel:
    """launch_varlen_grad reads and writes raw host addresses."""

    def __init__(self, spec, seqused_k):
        self.spec, self.seqused_k = spec, seqused_k
        self.launches, self.workspace_queries = [], []

    def workspace_bytes(self, batch, total_q, total_k):
        self.workspace_queries.append((batch, total_q, total_k))
        return 4096

    @staticmethod
    def _read(address, dtype, shape):
        count = int(np.prod(shape))
        raw = np.ctypeslib.as_array(ctypes.cast(address, ctypes.POINTER(ctypes.c_uint8)),
                                    (count * np.dtype(dtype).itemsize,))
        return raw.view(dtype).reshape(shape).copy()

    @staticmethod
    def _write(address, values):
        raw = np.ctypeslib.as_array(ctypes.cast(address, ctypes.POINTER(ctypes.c_uint8)), (values.nbytes,))
        raw[:] = np.ascontiguousarray(values).view(np.uint8).reshape(-1)

    def launch_varlen_grad(self, grad_out, q, k, v, out, lse, grad_lse, cu_seqlens_q, cu_seqlens_k, seqused_k,
                           grad_q, grad_k, grad_v, workspace, batch, total_q, total_k, max_seqlen_q, max_seqlen_k,
                           stream):
        s = self.spec
        bf16 = ml_dtypes.bfloat16
        assert s.dtype == "bf16" and s.head_dim == s.head_dim_v
        q_shape, k_shape = (total_q, s.num_heads, s.head_dim), (total_k, s.num_kv_heads, s.head_dim)
        assert all(address != 0 for address in (grad_out, q, k, v, out, lse, grad_lse, grad_q, grad_k, grad_v,
                                                workspace, cu_seqlens_q, cu_seqlens_k))
        assert (seqused_k != 0) == self.seqused_k
        cu_q = self._read(cu_seqlens_q, np.int32, (batch + 1,))
        cu_k = self._read(cu_seqlens_k, np.int32, (batch + 1,))
        used = self._read(seqused_k, np.int32, (batch,)) if seqused_k else None
        # The grid covers every sequence's rows, its unused keys included.
        assert max_seqlen_q >= np.diff(cu_q).max(initial=0) and max_seqlen_k >= np.diff(cu_k).max(initial=0)
        self.launches.append(dict(batch=batch, total_q=total_q, total_k=total_k, max_seqlen_q=max_seqlen_q,
                                  max_seqlen_k=max_seqlen_k, stream=stream))
        read16 = lambda address, shape: self._read(address, bf16, shape).astype(np.float64)  # noqa: E731
        qa, ka, va, doa = read16(q, q_shape), read16(k, k_shape), read16(v, k_shape), read16(grad_out, q_shape)
        read16(out, q_shape)
        self._read(lse, np.float32, (s.num_heads, total_q))
        dlse = self._read(grad_lse, np.float32, (s.num_heads, total_q)).astype(np.float64)
        grads = reference.attention_varlen_grad(qa, ka, va, doa, cu_q, cu_k, dlse=dlse, seqused_k=used,
                                                causal=s.causal, scale=s.scale, window=s.window,
                                                softcap=s.softcap)
        for address, g in zip((grad_q, grad_k, grad_v), grads):
            self._write(address, g.astype(bf16))


@pytest.fixture
def fake(monkeypatch):
    kernels = []

    def backward_kernel(spec, seqused_k, device):
        assert device.startswith("cuda:"), device
        kernels.append(FakeKernel(spec, seqused_k))
        return kernels[-1]

    monkeypatch.setattr(_varlen_cuda, "_backward_kernel", backward_kernel)
    monkeypatch.setattr(_varlen_cuda, "_raw_stream", lambda index: 1234)
    return kernels


def _offsets(lengths):
    return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)


def _inputs(lq, lk, hq, hkv, d, tail_q=3, tail_k=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    tq, tk = sum(lq) + tail_q, sum(lk) + tail_k
    q, do, out = (torch.randn(tq, hq, d, generator=g).to(torch.bfloat16) for _ in range(3))
    k, v = (torch.randn(tk, hkv, d, generator=g).to(torch.bfloat16) for _ in range(2))
    lse = torch.randn(hq, tq, generator=g)
    dlse = torch.randn(hq, tq, generator=g)
    return do, dlse, q, k, v, out, lse


def _call(do, dlse, q, k, v, out, lse, cu_q, cu_k, used=None, causal=True, scale=0.125, window=(-1, -1),
          softcap=0.0, deterministic=False):
    return torch.ops.fa3.attention_varlen_cuda_bwd(do, dlse, q, k, v, out, lse, cu_q, cu_k, used, causal, scale,
                                                   window[0], window[1], softcap, deterministic)


@pytest.mark.parametrize("d, padded", [(64, 64), (192, 256)])
@pytest.mark.parametrize("with_used", [False, True], ids=["all-keys", "seqused_k"])
def test_one_launch_with_the_packed_tensors(fake, d, padded, with_used):
    lq, lk, hq, hkv = [1, 0, 17, 70], [65, 17, 0, 69], 8, 2
    do, dlse, q, k, v, out, lse = _inputs(lq, lk, hq, hkv, d)
    cu_q, cu_k = _offsets(lq), _offsets(lk)
    used = torch.tensor([60, 5, 0, 30], dtype=torch.int32) if with_used else None
    dq, dk, dv = _call(do, dlse, q, k, v, out, lse, cu_q, cu_k, used, window=(20, 0), deterministic=True)
    (kernel,) = fake
    s = kernel.spec
    assert (s.head_dim, s.head_dim_v, s.num_heads, s.num_kv_heads) == (padded, padded, hq, hkv)
    assert s.deterministic and s.causal and s.scale == 0.125 and s.window == (20, 0) and s.softcap == 0.0
    assert kernel.seqused_k == with_used
    assert kernel.workspace_queries == [(4, q.shape[0], k.shape[0])]
    (launch,) = kernel.launches
    # The longest sequence of cu_seqlens_k (69 keys), whatever seqused_k says.
    assert launch == dict(batch=4, total_q=q.shape[0], total_k=k.shape[0], max_seqlen_q=70, max_seqlen_k=69,
                          stream=1234)
    for got, like in ((dq, q), (dk, k), (dv, v)):
        assert got.shape == like.shape and got.dtype == like.dtype and got.is_contiguous()
    f64 = lambda t: t.double().numpy()  # noqa: E731
    want = reference.attention_varlen_grad(f64(q), f64(k), f64(v), f64(do), cu_q.numpy(), cu_k.numpy(),
                                           dlse=f64(dlse), seqused_k=None if used is None else used.numpy(),
                                           causal=True, scale=0.125, window=(20, 0))
    for name, got, w in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
        err = np.abs(f64(got) - w).max()
        assert err <= 2**-8 * np.abs(w).max() + 1e-6, f"{name}: {err:.3g}"
    # The rows past the sequences get 0 (the stand-in writes the reference's).
    assert (dq[int(cu_q[-1]):] == 0).all() and (dk[int(cu_k[-1]):] == 0).all()


def test_no_sequences_still_launch(fake):
    """B = 0 with rows: one launch (the kernels' extra grid row zeroes every
    row), longest sequences 0."""
    do, dlse, q, k, v, out, lse = _inputs([], [], 4, 4, 64, tail_q=9, tail_k=5)
    zero = torch.zeros(1, dtype=torch.int32)
    dq, dk, dv = _call(do, dlse, q, k, v, out, lse, zero, zero)
    (launch,) = fake[0].launches
    assert (launch["batch"], launch["max_seqlen_q"], launch["max_seqlen_k"]) == (0, 0, 0)
    assert not dq.any() and not dk.any() and not dv.any()


@pytest.mark.parametrize("tail_q, tail_k", [(0, 4), (4, 0)], ids=["no-queries", "no-keys"])
def test_no_rows_on_one_side_needs_no_kernel(fake, tail_q, tail_k):
    """total_q = 0 or total_k = 0: nothing attends, every gradient is 0, and
    nothing is compiled or launched."""
    do, dlse, q, k, v, out, lse = _inputs([], [], 4, 2, 64, tail_q=tail_q, tail_k=tail_k)
    zero = torch.zeros(1, dtype=torch.int32)
    dq, dk, dv = _call(do, dlse, q, k, v, out, lse, zero, zero)
    assert not fake
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert not dq.any() and not dk.any() and not dv.any()


def test_bad_offsets_are_refused_before_the_launch(fake):
    do, dlse, q, k, v, out, lse = _inputs([4, 6], [6, 6], 4, 2, 64)
    with pytest.raises(ValueError, match=r"cu_seqlens_k\[-1\] = 99 exceeds the 14 packed rows of k and v"):
        _call(do, dlse, q, k, v, out, lse, _offsets([4, 6]), torch.tensor([0, 6, 99], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"seqused_k\[1\] = 7 must lie in \[0, 6\]"):
        _call(do, dlse, q, k, v, out, lse, _offsets([4, 6]), _offsets([6, 6]),
              torch.tensor([2, 7], dtype=torch.int32))
    assert not any(kernel.launches for kernel in fake)


def test_the_spec_compiles_deterministic_into_the_function():
    """What _backward_kernel compiles: one fa3.attention_varlen_grad without
    a grad_lse argument (a launch pointer), with seqused_k when asked and
    `deterministic` when the spec is."""
    from fa3._spec import AttentionSpec

    spec = AttentionSpec(dtype="bf16", num_heads=8, num_kv_heads=2, head_dim=128, head_dim_v=128, causal=True,
                         scale=0.125, deterministic=True)
    text = spec.varlen_backward_mlir(seqused_k=True)
    assert "fa3.attention_varlen_grad %do, %q, %k, %v, %o, %lse, %cuq, %cuk seqused_k %used {" in text
    assert "grad_lse" not in text and ", deterministic}" in text
    plain = AttentionSpec(dtype="bf16", num_heads=8, num_kv_heads=2, head_dim=128, head_dim_v=128)
    assert "deterministic" not in plain.varlen_backward_mlir()
