"""The in-process JIT cache over fa3._fa3.

Each (spec, device, direction, tiles) compiles once per process and is then
served from memory. Every compile also goes through fa3's on-disk kernel
cache (`FA3_CACHE_DIR`, else `$XDG_CACHE_HOME/fa3` or `~/.cache/fa3`):
entries are written atomically, keyed by the fa3 version and build, the
function's IR (the spec) and the tile options, plus the arch and CUDA driver
version for kernels or the host CPU for CPU object code, so a new process
skips the MLIR pipeline and LLVM (a CPU function loads in a few milliseconds
instead of tens). `FA3_DUMP_IR=1` keeps each stage's IR and the PTX next to
a CUDA cache entry.

CUDA forwards are compiled per length bucket: `forward_block_m` asks the
cost model for the query tile of a launch's Sq, and each distinct tile is
its own kernel.
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


_block_m = {}


def forward_block_m(spec, seq_q):
    """The query tile the cost model picks for `spec` at query length
    `seq_q`: the runtime compiles one forward per distinct answer (length
    buckets) and dispatches each launch to its bucket's kernel."""
    key = (spec.head_dim, spec.fp8, spec.causal, seq_q)
    bm = _block_m.get(key)
    if bm is None:
        bm = _block_m[key] = _module().select_forward_block_m(spec.head_dim, spec.fp8, spec.causal, seq_q)
    return bm


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
