"""The in-process JIT cache over fa3._fa3.

Each (spec, device, direction, tiles) compiles once per process and is then
served from memory. CUDA kernels (and PTX-only compiles) also go through
fa3's on-disk kernel cache (`FA3_CACHE_DIR`, else `$XDG_CACHE_HOME/fa3` or
`~/.cache/fa3`): entries are written atomically, keyed by the fa3 version,
the function's IR (the spec), the tile options, the arch and the CUDA driver
version, so a new process skips the MLIR pipeline. `FA3_DUMP_IR=1` keeps
each stage's IR and the PTX next to the cache entry. CPU functions are
re-JITted per process (tens of milliseconds) and cached in memory only.
"""

import threading

_lock = threading.Lock()
_cache = {}
_stats = {"hits": 0, "misses": 0, "compile_ms": []}


def _module():
    try:
        from . import _fa3
    except ImportError as e:  # pragma: no cover - exercised where the module is missing
        raise ImportError(
            "fa3._fa3 (the compiled extension) is not built: run `bash scripts/build.sh` "
            "(it builds python/fa3/_fa3*.so), or `FA3_LIBRARY=/path/to/libfa3.so pip install "
            f"--no-build-isolation ./python` ({e})") from e
    return _fa3


def get(spec, device, direction, block_m=0, block_n=0):
    """The compiled object for `spec`: a `_fa3.CpuFunction` (device "cpu") or
    a `_fa3.CudaKernel` (device "cuda": loaded on the GPU; "ptx": PTX only).
    `direction` is "fwd" or "bwd"."""
    key = (spec, device, direction, block_m, block_n)
    with _lock:
        obj = _cache.get(key)
        if obj is not None:
            _stats["hits"] += 1
            return obj
    m = _module()
    source = spec.forward_mlir() if direction == "fwd" else spec.backward_mlir()
    function = "attention" if direction == "fwd" else "attention_grad"
    if device == "cpu":
        obj = m.CpuFunction(source, function, block_m, block_n)
    else:
        kind = (m.CudaKernel.Kind.PTX_ONLY if device == "ptx"
                else m.CudaKernel.Kind.FORWARD if direction == "fwd" else m.CudaKernel.Kind.BACKWARD)
        obj = m.CudaKernel(source, function, kind, block_m, block_n)
    with _lock:
        _stats["misses"] += 1
        _stats["compile_ms"].append(obj.compile_ms)
        return _cache.setdefault(key, obj)


def cache_info():
    """In-memory cache statistics: entries, hits, misses and the compile
    time of each miss in milliseconds (a CUDA miss that hit the on-disk
    cache reports the load time)."""
    with _lock:
        return {"entries": len(_cache), "hits": _stats["hits"], "misses": _stats["misses"],
                "compile_ms": list(_stats["compile_ms"])}


def clear():
    """Drops the in-memory cache (the on-disk cache stays)."""
    with _lock:
        _cache.clear()
        _stats.update(hits=0, misses=0, compile_ms=[])
