"""fa3.compile_mlir (an MLIR function through fa3._fa3 and libfa3's C API)
in this process on torch CUDA tensors: results against a float64 reference
with SDPA's error as the yardstick, launches on a side stream, and errors
that name the problem. (The C API itself is tested from C by
test/CAPI/fa3-capi-test.c, whose --gpu half scripts/gpu/run.sh runs.)"""


import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import fa3

MLIR = """func.func @attn(%q: tensor<?x?x8x128xbf16>, %k: tensor<?x?x2x128xbf16>, %v: tensor<?x?x2x128xbf16>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>
}
"""


def test_compile_mlir_causal_gqa_matches_reference():
    torch.manual_seed(1)
    b, sq, sk = 2, 777, 1234  # ragged in both directions, Sq != Sk
    q = torch.randn(b, sq, 8, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, sk, 2, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, sk, 2, 128, device="cuda", dtype=torch.bfloat16)
    kernel = fa3.compile_mlir(MLIR, "attn")
    assert kernel.device == "cuda:0"
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, 8, sq), float("nan"), device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        kernel.launch_into(q, k, v, o, lse)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert not torch.isnan(o).any() and not torch.isnan(lse).any()

    i = torch.arange(sq, device="cuda")[:, None]
    j = torch.arange(sk, device="cuda")[None, :]
    mask = j <= i + (sk - sq)  # bottom-right causal
    kk, vv = (x.repeat_interleave(4, dim=2) for x in (k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), kk.double()) / 128 ** 0.5
    s = s.masked_fill(~mask, float("-inf"))
    ref_lse = torch.logsumexp(s, -1)
    ref = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), vv.double())
    sdpa = F.scaled_dot_product_attention(q.transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2),
                                          attn_mask=mask).transpose(1, 2).double()
    sdpa_err = (sdpa - ref).abs().max().item()
    err = (o.double() - ref).abs().max().item()
    assert err <= 2 * sdpa_err + 1e-5, (err, sdpa_err)
    assert (lse.double() - ref_lse).abs().max().item() <= 1e-3 * (1 + ref_lse.abs().max().item())


def test_compile_mlir_reports_bad_source():
    with pytest.raises(fa3.Error, match="cannot parse the MLIR source"):
        fa3.compile_mlir("func.func @attn(", "attn")


def test_compile_mlir_reports_unknown_function():
    with pytest.raises(fa3.Error, match="no function 'nope'"):
        fa3.compile_mlir(MLIR, "nope")


def test_compile_mlir_reports_unsupported_head_dim():
    src = MLIR.replace("x128xbf16", "x96xbf16")
    with pytest.raises(fa3.Error, match="head dims 64, 128, 192 and 256"):
        fa3.compile_mlir(src, "attn")


def test_launch_into_checks_the_device_and_layout():
    kernel = fa3.compile_mlir(MLIR, "attn")
    q = torch.randn(1, 64, 8, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 64, 2, 128, device="cuda", dtype=torch.bfloat16)
    o, lse = torch.empty_like(q), torch.empty(1, 8, 64, device="cuda")
    with pytest.raises(ValueError, match="k must be a contiguous torch tensor on cuda:0"):
        kernel.launch_into(q, k.cpu(), k, o, lse)
    with pytest.raises(ValueError, match="q must be a contiguous"):
        kernel.launch_into(q.transpose(1, 2), k, k, o, lse)
    with pytest.raises(ValueError, match="launch_grad_into runs a backward"):
        kernel.launch_grad_into(q, q, k, k, o, lse, q, k, k)


def test_ptx_and_cuda_compiles_share_a_cache_entry(tmp_path):
    """A CUDA cache entry is PTX plus the kernel's manifest, independent of
    the driver: after a PTX-only compile (what fa3.jax does at trace time to
    size the backward's workspace) the compile for the GPU of the same
    function is a cache hit, in a fresh process."""
    child = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import fa3
ptx = fa3.compile("bf16", 4, 64, num_kv_heads=2, softcap=2.25, device="ptx", backward=True)
gpu = fa3.compile("bf16", 4, 64, num_kv_heads=2, softcap=2.25, device="cuda", backward=True)
print(json.dumps({"ptx_hit": ptx.cache_hit, "gpu_hit": gpu.cache_hit, "same": ptx.ptx == gpu.ptx}))
"""
    repo = pathlib.Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-c", child, str(repo / "python")], capture_output=True, text=True,
                          env=dict(os.environ, FA3_CACHE_DIR=str(tmp_path)), timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"ptx_hit": False, "gpu_hit": True, "same": True}, result
