"""The runtime under fa3.attention on the H200: kernels per CUDA device, the
cached call plan (a cached call must still honour every option), CUDA-graph
capture of the forward and backward, and the FP8 preparation's device.

Bounds: a replayed graph runs the very kernels of the eager call on the same
inputs, so its forward is bit-identical; its backward may differ only in
the order of dQ's atomic f32 additions (a few bf16 ulps of |dQ|). Against
the float64 reference the bound is test_python_gpu.py's: 2x SDPA's own
error + 1e-5."""

import math

import pytest
import torch
import torch.nn.functional as F

import fa3
from fa3 import reference


def _ref(q, k, v, causal, window=(-1, -1), scale=None):
    group = q.shape[2] // k.shape[2]
    q64, k64, v64 = (x.detach().double() for x in (q, k, v))
    kk, vv = k64.repeat_interleave(group, 2), v64.repeat_interleave(group, 2)
    s = torch.einsum("bqhd,bkhd->bhqk", q64, kk) * (scale or 1 / math.sqrt(q.shape[-1]))
    mask = torch.from_numpy(reference.visible(q.shape[1], k.shape[1], causal, window)).to(q.device)
    p = torch.softmax(s.masked_fill(~mask, float("-inf")), -1)
    return torch.einsum("bhqk,bkhd->bqhd", p, vv)


def _sdpa_err(q, k, v, causal, ref):
    group = q.shape[2] // k.shape[2]
    kk, vv = k.repeat_interleave(group, 2), v.repeat_interleave(group, 2)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2),
                                       is_causal=causal).transpose(1, 2)
    return (o.double() - ref).abs().max().item()


def test_kernels_load_on_the_tensors_device():
    kernel = fa3.compile("bf16", 4, 64, device="cuda:0")
    assert kernel.device == "cuda:0"
    assert fa3.compile("bf16", 4, 64, device="cuda").device == f"cuda:{torch.cuda.current_device()}"
    missing = torch.cuda.device_count()
    with pytest.raises(ValueError, match=f"cuda:{missing} does not exist"):
        fa3.compile("bf16", 4, 64, device=f"cuda:{missing}")
    with pytest.raises(ValueError, match="device must be"):
        fa3.compile("bf16", 4, 64, device="gpu")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices (this machine has fewer)")
def test_second_device_runs_and_keeps_the_current_device():
    torch.manual_seed(4)
    q, k, v = (torch.randn(2, 333, 4, 128, device="cuda:1", dtype=torch.bfloat16) for _ in range(3))
    torch.cuda.set_device(0)
    out = fa3.attention(q, k, v, causal=True)
    assert out.device == torch.device("cuda:1")
    assert torch.cuda.current_device() == 0  # fa3 entered device 1's context and left it
    ref = _ref(q, k, v, True)
    assert (out.double() - ref).abs().max().item() <= 2 * _sdpa_err(q, k, v, True, ref) + 1e-5
    with pytest.raises(ValueError, match="k is on cuda:0 but q is on cuda:1"):
        fa3.attention(q, k.to("cuda:0"), v)


def test_cached_plans_honour_every_option():
    """The second call of a shape takes the cached plan: each option still
    selects its own kernel (a stale plan would return the first result)."""
    torch.manual_seed(6)
    q, k, v = (torch.randn(1, 200, 4, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    variants = [dict(), dict(causal=True), dict(softmax_scale=0.05), dict(window_size=(16, 8)),
                dict(window_size=[16, 8]), dict(causal=True, window_size=(32, 0))]
    for _ in range(2):
        for options in variants:
            out = fa3.attention(q, k, v, **options)
            causal = options.get("causal", False)
            window = tuple(options.get("window_size", (-1, -1)))
            ref = _ref(q, k, v, causal, window if not causal else (window[0], -1), options.get("softmax_scale"))
            # bf16 rounding of O and P: a few 2^-8 of max|V|; a stale plan
            # (another option's result) errs by O(1).
            assert (out.double() - ref).abs().max().item() <= 4 * 2**-8 * v.abs().max().item(), options
    # A rejected option is rejected on every call, cached plan or not.
    fa3.attention(q, k, v, causal=True)
    with pytest.raises(TypeError, match="causal must be a bool"):
        fa3.attention(q, k, v, causal=1)


def test_cuda_graph_captures_forward_and_backward(capture_cuda_graph):
    torch.manual_seed(7)
    shape_q, shape_kv = (2, 300, 8, 128), (2, 300, 2, 128)
    q = torch.randn(shape_q, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(shape_kv, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(shape_kv, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(shape_q, device="cuda", dtype=torch.bfloat16)

    def step():
        for x in (q, k, v):
            x.grad = None
        out = fa3.attention(q, k, v, causal=True)
        out.backward(do)
        return out

    graph, static_out = capture_cuda_graph(step)
    static_grads = (q.grad, k.grad, v.grad)
    # New inputs copied into the captured buffers, then replayed.
    for trial in range(2):
        with torch.no_grad():
            for x in (q, k, v):
                x.copy_(torch.randn_like(x))
            do.copy_(torch.randn_like(do))
        graph.replay()
        torch.cuda.synchronize()
        qe, ke, ve = (x.detach().clone().requires_grad_() for x in (q, k, v))
        eager = fa3.attention(qe, ke, ve, causal=True)
        eager.backward(do)
        assert torch.equal(static_out, eager), trial
        for name, g, e in zip(("dq", "dk", "dv"), static_grads, (qe.grad, ke.grad, ve.grad)):
            tol = 4 * 2**-8 * e.abs().max().item()
            assert (g.float() - e.float()).abs().max().item() <= tol, (trial, name)
        ref = _ref(q, k, v, True)
        assert (static_out.double() - ref).abs().max().item() <= 2 * _sdpa_err(q, k, v, True, ref) + 1e-5


def test_fp8_preparation_runs_on_the_tensors_stream():
    """fp8=True's quantization kernels run on the current stream like the
    attention: on a side stream the result equals the default stream's."""
    torch.manual_seed(8)
    q, k, v = (torch.randn(1, 500, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    expected = fa3.attention(q, k, v, fp8=True, hadamard=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = fa3.attention(q, k, v, fp8=True, hadamard=True)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert torch.equal(out, expected)


def test_inference_without_lse_uses_a_scratch_lse_safely(capture_cuda_graph):
    # fa3.attention without return_lse and without autograd lets the kernel
    # write its LSE into one buffer per plan (one allocation fewer per call):
    # outputs are unchanged, an LSE handed out earlier is never that buffer,
    # and a captured graph gets an LSE of its own.
    torch.manual_seed(11)
    q = torch.randn(2, 200, 8, 64, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, 300, 2, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o1 = fa3.attention(q, k, v, causal=True)
    o2, lse = fa3.attention(q, k, v, causal=True, return_lse=True)
    kept = lse.clone()
    o3 = fa3.attention(q * 2, k, v, causal=True)  # writes the scratch LSE, not `lse`
    torch.cuda.synchronize()
    assert torch.equal(o1, o2) and not torch.equal(o1, o3)
    assert torch.equal(lse, kept)

    static_q = q.clone()
    graph, static_out = capture_cuda_graph(lambda: fa3.attention(static_q, k, v, causal=True))
    static_q.copy_(q * 2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, o3)
