"""CPU functions in the on-disk kernel cache (FA3_CACHE_DIR), as CUDA
kernels are: a second process loads the object code instead of running the
pipeline and LLVM; a truncated or altered entry is rebuilt; processes that
compile the same function at once all succeed and leave one valid entry.
Each child process runs the function on fixed random inputs and reports
its outputs, so a hit is checked to compute exactly what a miss did."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]

_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import fa3
k = fa3.compile("f32", 4, 64, num_kv_heads=2, causal=True, softcap=3.25, device="cpu")
rng = np.random.default_rng(7)
q = rng.standard_normal((2, 37, 4, 64)).astype(np.float32)
kv = rng.standard_normal((2, 53, 2, 64)).astype(np.float32)
out, lse = k(q, kv, kv * 0.5)
print(json.dumps({"hit": k.cache_hit, "ms": k.compile_ms, "out": out.ravel()[::97].tolist(),
                  "lse": lse.ravel()[::31].tolist(), "sum": float(np.abs(out).sum())}))
"""


def _start(cache_dir):
    env = dict(os.environ, FA3_CACHE_DIR=str(cache_dir))
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(REPO / "python")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _finish(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def _child(cache_dir):
    return _finish(_start(cache_dir))


def _entries(cache_dir):
    return [p for p in pathlib.Path(cache_dir).iterdir() if p.is_dir()]


def _reference(result):
    """A float64 check of the child's outputs: causal GQA with softcap."""
    rng = np.random.default_rng(7)
    q = rng.standard_normal((2, 37, 4, 64))
    kv = rng.standard_normal((2, 53, 2, 64))
    k, v = np.repeat(kv, 2, axis=2), np.repeat(kv * 0.5, 2, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, k) / 8.0
    s = 3.25 * np.tanh(s / 3.25)
    offset = 53 - 37  # bottom-right causal alignment
    visible = np.arange(53)[None, :] <= np.arange(37)[:, None] + offset
    s = np.where(visible, s, -np.inf)
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    o = np.einsum("bhqk,bkhd->bqhd", np.exp(s - lse[..., None]), v)
    np.testing.assert_allclose(result["out"], o.ravel()[::97], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(result["lse"], lse.ravel()[::31], rtol=1e-5, atol=1e-5)


def test_second_process_loads_the_object(tmp_path):
    first = _child(tmp_path)
    assert not first["hit"]
    _reference(first)
    (entry,) = _entries(tmp_path)
    manifest = (entry / "manifest.txt").read_text()
    assert "kind=cpu-object" in manifest and (entry / "kernel.bin").stat().st_size > 1000
    second = _child(tmp_path)
    assert second["hit"], second
    # The loaded object computes exactly what the freshly compiled one did.
    assert second["out"] == first["out"] and second["lse"] == first["lse"]
    assert second["ms"] < first["ms"], (first["ms"], second["ms"])


def test_truncated_and_altered_entries_are_rebuilt(tmp_path):
    first = _child(tmp_path)
    (entry,) = _entries(tmp_path)
    blob = entry / "kernel.bin"
    data = blob.read_bytes()
    blob.write_bytes(data[: len(data) // 2])  # truncated
    again = _child(tmp_path)
    assert not again["hit"] and again["out"] == first["out"]
    assert _child(tmp_path)["hit"]  # the rebuilt entry is valid
    blob.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])  # same size, altered
    altered = _child(tmp_path)
    assert not altered["hit"] and altered["out"] == first["out"]
    assert _child(tmp_path)["hit"]


def test_concurrent_writers(tmp_path):
    procs = [_start(tmp_path) for _ in range(4)]
    results = [_finish(p) for p in procs]
    for r in results:
        assert r["out"] == results[0]["out"]
    _reference(results[0])
    (entry,) = _entries(tmp_path)
    # No temporary files left behind by the racing writers.
    assert sorted(p.name for p in entry.iterdir()) == ["kernel.bin", "manifest.txt"]
    assert _child(tmp_path)["hit"]
