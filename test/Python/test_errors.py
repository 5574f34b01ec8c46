"""Bad arguments raise ValueError/TypeError naming the argument and what was
expected; driver failures raise RuntimeError with the driver's message."""

import ml_dtypes
import numpy as np
import pytest

import fa3


def _qkv(b=1, sq=8, sk=8, hq=4, hkv=2, d=32, dv=None, dtype=np.float32):
    return (np.zeros((b, sq, hq, d), dtype), np.zeros((b, sk, hkv, d), dtype),
            np.zeros((b, sk, hkv, dv or d), dtype))


@pytest.mark.parametrize("make, exc, match", [
    (lambda: (list(np.zeros((1, 2, 2, 8))), *_qkv()[1:]), TypeError, "q must be a torch.Tensor"),
    (lambda: (_qkv()[0][0], *_qkv()[1:]), ValueError, r"q must have 4 dims .*got shape \(8, 4, 32\)"),
    (lambda: (_qkv()[0], _qkv(b=2)[1], _qkv()[2]), ValueError, "batch sizes differ: q has 1, k has 2"),
    (lambda: (_qkv()[0], _qkv(sk=9)[1], _qkv()[2]), ValueError, "k and v sequence lengths differ: 9 vs 8"),
    (lambda: _qkv(hq=3, hkv=2), ValueError, "q's 3 heads must be a positive multiple of k/v's 2 heads"),
    (lambda: (_qkv()[0], _qkv(d=64)[1], _qkv()[2]), ValueError, "head dims differ: q has 32, k has 64"),
    (lambda: _qkv(d=36), ValueError, "head dim must be a multiple of 8"),
    (lambda: _qkv(dtype=np.float64), TypeError, "q has dtype float64"),
    (lambda: (_qkv()[0], _qkv(dtype=np.float16)[1], _qkv()[2]), TypeError, "k has dtype float16 but q has float32"),
    (lambda: (np.zeros((1, 8, 4, 64), np.float32)[..., ::2], *_qkv()[1:]), ValueError,
     "q's last dim must be contiguous"),
])
def test_bad_tensors(make, exc, match):
    q, k, v = make()
    with pytest.raises(exc, match=match):
        fa3.attention(q, k, v)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"causal": 1}, TypeError, "causal must be a bool"),
    ({"softmax_scale": -1.0}, ValueError, "softmax_scale must be positive"),
    ({"softmax_scale": "x"}, TypeError, "softmax_scale must be a float"),
    ({"window_size": 3}, TypeError, r"window_size must be a pair of ints"),
    ({"window_size": (-2, 0)}, ValueError, "window_size entries must be >= -1"),
    ({"causal": True, "window_size": (4, 2)}, ValueError, "window_size right bound must be -1 or 0"),
    ({"softcap": -1.0}, ValueError, "softcap must be >= 0"),
    ({"return_lse": "yes"}, TypeError, "return_lse must be a bool"),
    ({"pack_gqa": 1}, TypeError, "pack_gqa must be a bool or None, got int"),
])
def test_bad_options(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fa3.attention(*_qkv(), **kwargs)


def test_pack_gqa_needs_a_group_dividing_64_and_16_bit_inputs():
    # 6 / 2 = 3 query heads per kv head do not divide a warpgroup's 64 rows.
    with pytest.raises(ValueError, match=r"pack_gqa=True: the group of 6 / 2 = 3 query heads must divide 64"):
        fa3.attention(*_qkv(hq=6, hkv=2), pack_gqa=True)
    with pytest.raises(ValueError, match="pack_gqa=True: the FP8 kernels do not pack query heads"):
        fa3.attention(*_qkv(d=64), fp8=True, pack_gqa=True)
    # Without a group there is nothing to pack: True is accepted and changes
    # nothing; None and False leave a non-dividing group unpacked.
    out = fa3.attention(*_qkv(hq=2, hkv=2), pack_gqa=True)
    assert out.shape == (1, 8, 2, 32)
    for choice in (None, False):
        assert fa3.attention(*_qkv(hq=6, hkv=2), pack_gqa=choice).shape == (1, 8, 6, 32)


def test_bfloat16_numpy_arrays_run():
    q, k, v = (x.astype(ml_dtypes.bfloat16) for x in _qkv())
    out = fa3.attention(q + 1, k + 1, v + 1)
    assert out.dtype == ml_dtypes.bfloat16 and np.all(np.isfinite(out.astype(np.float32)))


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"dtype": "f64"}, TypeError, "dtype must be one of bf16, f16, f32"),
    ({"device": "tpu"}, ValueError, "device must be 'cuda', 'cuda:N', 'ptx' or 'cpu'"),
    ({"dtype": "f32", "device": "ptx"}, TypeError, "dtype f32 runs on the CPU only"),
    ({"head_dim": 96, "device": "ptx"}, ValueError, r"head_dim must be one of \(64, 128, 256\) for a CUDA kernel, got 96"),
    ({"head_dim_v": 64, "device": "ptx"}, ValueError, r"v's head dim must equal q's for a CUDA kernel, got 64 vs 128"),
    ({"num_heads": 6, "num_kv_heads": 4}, ValueError, "q's 6 heads must be a positive multiple"),
    ({"block_m": -64}, TypeError, "block_m must be a non-negative int"),
])
def test_bad_compile_arguments(kwargs, exc, match):
    args = {"dtype": "bf16", "num_heads": 8, "head_dim": 128, "device": "cpu"}
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        fa3.compile(**args)


def test_compiler_errors_are_runtime_errors_with_the_diagnostic():
    """A tile the Hopper backend rejects: the verifier's message comes back."""
    with pytest.raises(RuntimeError, match="on sm_90a block-m must be a multiple of 64 .*got 96"):
        fa3.compile("bf16", 8, 128, device="ptx", block_m=96)
    assert issubclass(fa3.Error, RuntimeError)


def test_cuda_without_a_driver_names_the_driver_call():
    """On a machine without libcuda the CUDA path fails with the loader's
    message, never a crash. (Where a GPU exists this test is meaningless, so
    it asserts the other outcome there: the kernel loads.)"""
    try:
        kernel = fa3.compile("bf16", 8, 128, device="cuda")
    except RuntimeError as e:
        assert "libcuda" in str(e) or "CUDA" in str(e), str(e)
    else:
        assert kernel.name.startswith("fa3_fwd_bf16_d128")


def test_kernel_call_checks():
    cpu = fa3.compile("f32", 4, 32, num_kv_heads=2, device="cpu")
    with pytest.raises(TypeError, match="this kernel takes 3 tensors, got 2"):
        cpu(*_qkv()[:2])
    with pytest.raises(ValueError, match="a CPU kernel has no PTX"):
        cpu.ptx
    ptx = fa3.compile("bf16", 8, 128, device="ptx")
    with pytest.raises(ValueError, match="cannot run"):
        ptx(*_qkv())


def test_capi_compiles_fp8_prep_ops_to_ptx_only():
    """fa3.hadamard and fa3.quantize compile through the C API to PTX (their
    kernels are real); fa3_compile_quantize loads a quantization for a
    launch (test_fp8_gpu.py runs it on the H200)."""
    from fa3 import _fa3

    src = ("func.func @h(%x: tensor<?x?x2x128xbf16>) -> tensor<?x?x2x128xf32> {\n"
           "  %y = fa3.hadamard %x {seed = 3 : i64} : tensor<?x?x2x128xbf16> -> tensor<?x?x2x128xf32>\n"
           "  return %y : tensor<?x?x2x128xf32>\n}\n")
    k = _fa3.CudaKernel(src, "h", _fa3.CudaKernel.Kind.PTX_ONLY, 0, 0)
    assert k.name == "fa3_hadamard_bf16_f32_d128_s3"
    assert "shfl.sync.bfly.b32" in k.ptx


def test_a_cast_fp8_attention_is_not_one_kernel():
    """fa3-cast-fp8 turns an attention marked fp8 into a chain of kernels; a
    single-kernel compile says so (it once dereferenced the replaced op)."""
    from fa3._spec import AttentionSpec

    spec = AttentionSpec(dtype="bf16", num_heads=4, num_kv_heads=2, head_dim=64, head_dim_v=64, scale=0.125,
                         cast_fp8=True, hadamard=True)
    with pytest.raises(fa3.Error, match="has an 'fp8' attribute, which fa3-cast-fp8 turns into a chain of kernels"):
        fa3.compile_mlir(spec.forward_mlir(), "attention", device="ptx")


def test_poly_exp2_schedule_compiles_for_fp8_only():
    """`poly_exp2` (every N-th FP8 exponential on the FMA pipe) reaches the
    Python schedule helpers: the cost model writes 8 for the FP8 d128
    192-key kernel and 0 for causal d128 (128 keys) and d64 (192 keys), a schedule
    with it compiles the FP8 forward to PTX with fewer ex2.approx (the
    kernel name says _pe8), and the bf16 forward refuses it by name."""
    from fa3 import _jit, schedules
    from fa3._spec import AttentionSpec

    fields = dict(_jit._module().select_forward_schedule(128, True, False, 8192, 8192))
    assert (fields["block_n"], fields["poly_exp2"]) == (192, 8)
    causal128 = dict(_jit._module().select_forward_schedule(128, True, True, 8192, 8192))
    assert (causal128["block_n"], causal128["poly_exp2"]) == (128, 0)
    # d64 takes 192-key blocks too, without poly_exp2 (mixed there).
    for causal in (False, True):
        d64 = dict(_jit._module().select_forward_schedule(64, True, causal, 8192, 8192))
        assert (d64["block_n"], d64["poly_exp2"]) == (192, 0), causal
    fp8 = AttentionSpec("f8E4M3FN", 8, 2, 128, 128, False, 128 ** -0.5)
    base = fa3.compile_mlir(fp8.forward_mlir(schedules.schedule(**dict(fields, poly_exp2=0))), "attention",
                            device="ptx")
    pe8 = fa3.compile_mlir(fp8.forward_mlir(schedules.schedule(**fields)), "attention", device="ptx")
    assert "_pe8_" in pe8.ptx and "_pe8_" not in base.ptx
    assert pe8.ptx.count("ex2.approx") < base.ptx.count("ex2.approx")
    bf16 = AttentionSpec("bf16", 8, 2, 128, 128, False, 128 ** -0.5)
    with pytest.raises(fa3.Error, match="poly_exp2 = 8: the Hopper forward kernel computes every exponential"):
        fa3.compile_mlir(bf16.forward_mlir(schedules.schedule(**dict(fields, poly_exp2=8))), "attention",
                         device="ptx")
