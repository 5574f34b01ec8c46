"""The CUDA varlen path's kernels without a GPU: fa3._varlen_cuda._kernel
compiled to sm_90a PTX only (the compile a CUDA call makes, through the C
API's kernel cache), at every head dim the path takes, with and without
seqused_k and PackGQA. The kernel's entry must take the parameters
launchAttentionVarlen passes (12; 13 with seqused_k), and ptxas, where
present, must assemble it without spills.

The backward's (fa3._varlen_cuda._backward_kernel, fa3.attention_varlen_grad)
likewise, at its head dims (64, 128, 256), with and without seqused_k and
deterministic: its three entries must take what
launchAttentionVarlenBackward passes (`_pre` 9, the main kernel 13 plus
seqused_k plus the turn counters, `_post` 4), and ptxas must assemble them
(the dense backward spills a few words at d128 and d256, so spills are
reported, not refused)."""

import os
import pathlib
import re
import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")

from fa3 import _varlen_cuda  # noqa: E402
from fa3._spec import AttentionSpec  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]

CASES = [  # dtype, hq, hkv, d, causal, window, softcap, seqused_k, pack_gqa
    ("bf16", 32, 8, 128, True, (-1, -1), 0.0, False, False),
    ("bf16", 32, 8, 128, True, (-1, -1), 0.0, False, True),
    ("f16", 4, 1, 64, False, (-1, -1), 0.0, True, False),
    ("f16", 4, 1, 64, False, (-1, -1), 0.0, True, True),
    ("bf16", 8, 2, 192, True, (-1, -1), 0.0, False, True),
    ("f16", 8, 8, 256, False, (32, 8), 30.0, True, False),
]


def _ptxas():
    """ptxas from FA3_PTXAS, the build's CMake cache, or PATH (None if none)."""
    candidates = [os.environ.get("FA3_PTXAS")]
    cache = pathlib.Path(os.environ.get("FA3_BUILD_DIR", REPO / "build")) / "CMakeCache.txt"
    if cache.is_file():
        m = re.search(r"^FA3_PTXAS:FILEPATH=(.+)$", cache.read_text(), re.M)
        candidates.append(m and m.group(1))
    candidates.append(shutil.which("ptxas"))
    return next((c for c in candidates if c and os.path.isfile(c)), None)


@pytest.mark.parametrize("case", CASES,
                         ids=lambda c: f"{c[0]}-h{c[1]}x{c[2]}-d{c[3]}-used{int(c[7])}-pack{int(c[8])}")
def test_varlen_kernel_compiles_with_the_launch_parameters(case, tmp_path):
    dtype, hq, hkv, d, causal, window, softcap, used, pack = case
    assert d in _varlen_cuda.VARLEN_CUDA_HEAD_DIMS
    spec = AttentionSpec(dtype=dtype, num_heads=hq, num_kv_heads=hkv, head_dim=d, head_dim_v=d, causal=causal,
                         scale=0.125, window=window, softcap=softcap)
    kernel = _varlen_cuda._kernel(spec, used, "ptx", pack_gqa=pack)
    ptx = kernel.ptx.rstrip("\0")
    entry = re.search(r"\.entry (\S+)\(([^)]*)\)", ptx)
    assert entry and entry.group(1) == kernel.name and "_varlen" in kernel.name
    assert (f"_pg{hq // hkv}_" in kernel.name) == pack, kernel.name
    params = re.findall(r"\.param ", entry.group(2))
    # Q, K, V, O maps, LSE, Tq, Tk, B, tile counter, cu_seqlens_q,
    # cu_seqlens_k, O's address[, seqused_k].
    assert len(params) == (13 if used else 12), entry.group(0)
    ptxas = _ptxas()
    if ptxas is None:
        pytest.skip("no ptxas (FA3_PTXAS, the CMake cache or PATH) to assemble the PTX")
    (tmp_path / "k.ptx").write_text(ptx)
    proc = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr + proc.stdout


BACKWARD_CASES = [  # dtype, hq, hkv, d, causal, window, softcap, seqused_k, deterministic
    ("bf16", 32, 8, 128, True, (-1, -1), 0.0, False, False),
    ("f16", 4, 1, 64, False, (16, 40), 30.0, True, False),
    ("bf16", 8, 2, 256, True, (-1, -1), 0.0, False, True),
    ("bf16", 8, 8, 64, False, (-1, -1), 0.0, True, True),
]


@pytest.mark.parametrize("case", BACKWARD_CASES,
                         ids=lambda c: f"{c[0]}-h{c[1]}x{c[2]}-d{c[3]}-used{int(c[7])}-det{int(c[8])}")
def test_varlen_backward_compiles_with_the_launch_parameters(case, tmp_path):
    dtype, hq, hkv, d, causal, window, softcap, used, deterministic = case
    spec = AttentionSpec(dtype=dtype, num_heads=hq, num_kv_heads=hkv, head_dim=d, head_dim_v=d, causal=causal,
                         scale=0.125, window=window, softcap=softcap, deterministic=deterministic)
    kernel = _varlen_cuda._backward_kernel(spec, used, "ptx")
    ptx = kernel.ptx.rstrip("\0")
    params = {name: len(re.findall(r"\.param ", text)) for name, text in re.findall(r"\.entry (\S+)\(([^)]*)\)", ptx)}
    # dO, O, LSE, dLSE, the dQ accumulator, LSE·log2(e), Δ, Tq,
    # cu_seqlens_q.
    assert params.get(kernel.name + "_pre") == 9, params
    # Q, K, V, dO maps, LSE·log2(e), Δ, the accumulator, dK, dV, Tq, Tk,
    # cu_seqlens_q, cu_seqlens_k[, seqused_k][, turn counters].
    assert params.get(kernel.name) == 13 + used + deterministic, params
    # The accumulator, dQ, Tq, cu_seqlens_q.
    assert params.get(kernel.name + "_post") == 4, params
    ptxas = _ptxas()
    if ptxas is None:
        pytest.skip("no ptxas (FA3_PTXAS, the CMake cache or PATH) to assemble the PTX")
    (tmp_path / "k.ptx").write_text(ptx)
    proc = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    print("\n".join(line for line in (proc.stderr + proc.stdout).splitlines() if "spill" in line))
