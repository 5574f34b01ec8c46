"""The JIT cache: in-memory hits within a process, the on-disk kernel cache
across processes (PTX compiles need no GPU), FA3_DUMP_IR, compile times."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

import fa3

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_second_call_hits_the_memory_cache():
    q = np.ones((1, 3, 2, 32), np.float32)
    fa3.attention(q, q, q, softcap=1.5)  # a spec no other test uses
    before = fa3.cache_info()
    fa3.attention(q * 2, q, q, softcap=1.5)
    after = fa3.cache_info()
    assert after["hits"] == before["hits"] + 1
    assert after["misses"] == before["misses"]
    assert after["entries"] == before["entries"]
    # Every compile so far was well under the 2 s target.
    assert max(after["compile_ms"]) < 2000, after["compile_ms"]


_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import fa3
k = fa3.compile("bf16", 8, 128, num_kv_heads=2, causal=True, device="ptx")
g = fa3.compile("bf16", 8, 128, num_kv_heads=2, causal=True, device="ptx", backward=True)
print(json.dumps({"fwd_hit": k.cache_hit, "bwd_hit": g.cache_hit, "fwd_ms": k.compile_ms,
                  "bwd_ms": g.compile_ms, "name": k.name, "ptx_lines": len(k.ptx.splitlines())}))
"""


def _child(cache_dir, dump=False):
    env = dict(os.environ, FA3_CACHE_DIR=str(cache_dir))
    env.pop("FA3_DUMP_IR", None)
    if dump:
        env["FA3_DUMP_IR"] = "1"
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(REPO / "python")], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_disk_cache_survives_processes(tmp_path):
    first = _child(tmp_path)
    assert not first["fwd_hit"] and not first["bwd_hit"]
    assert first["name"].startswith("fa3_fwd_bf16_d128_h8x2") and first["ptx_lines"] > 100
    assert first["fwd_ms"] < 2000 and first["bwd_ms"] < 2000, first
    second = _child(tmp_path)
    assert second["fwd_hit"] and second["bwd_hit"], second
    assert second["fwd_ms"] < first["fwd_ms"]
    # Entries are files under the cache directory, written atomically (no
    # temporary files left behind).
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and not any(".tmp" in p.name for p in files), files


def test_dump_ir_keeps_each_stage(tmp_path):
    _child(tmp_path, dump=True)
    names = {p.name for p in tmp_path.rglob("*") if p.is_file()}
    assert "kernel.ptx" in names, names
    assert any(n.endswith(".mlir") for n in names), names
