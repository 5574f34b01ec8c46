"""The in-process JIT cache over fa3._fa3.

Each (MLIR function, device, direction, tiles) compiles once per process
and is then served from memory. Every compile also goes through fa3's
on-disk kernel cache (`FA3_CACHE_DIR`, else `$XDG_CACHE_HOME/fa3` or
`~/.cache/fa3`): entries are written atomically, keyed by the fa3 version and
build, the function's IR and the tile options, plus the arch for kernels
(PTX: a "ptx" compile and a "cuda:N" compile share an entry) or the host
CPU for CPU object code, so a new process
skips the MLIR pipeline and LLVM (a CPU function loads in a few milliseconds
instead of tens). `FA3_DUMP_IR=1` keeps each stage's IR and the PTX next to
a CUDA cache entry.

Devices are "cpu", "ptx" (sm_90a PTX only, no GPU needed) and "cuda:N": a
CUDA kernel is loaded on device N (compiled under `torch.cuda.device(N)`,
whose context libfa3 then uses) and launches there whatever device is
current.

CUDA forwards are compiled per length bucket: `forward_schedule` asks the
compiler's cost model for the `#fa3.schedule` of a launch's (Sq, Sk) (the
query tile follows Sq, a persistent grid short key loops), the schedule is
written into the fa3.attention that is compiled, and each distinct schedule
is its own kernel.
"""

import contextlib
import sys
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


def device_key(device):
    """"cpu", "ptx" or "cuda:N" for a device argument: "cuda" is torch's
    current device (device 0 without torch), "cuda:N" and torch.device are
    taken as they are. Raises ValueError for anything else."""
    text = str(device)
    if text in ("cpu", "ptx"):
        return text
    if text == "cuda":
        torch = sys.modules.get("torch")
        index = torch.cuda.current_device() if torch is not None and torch.cuda.is_initialized() else 0
        return f"cuda:{index}"
    if text.startswith("cuda:") and text[5:].isdigit():
        return f"cuda:{int(text[5:])}"
    raise ValueError(f"device must be 'cuda', 'cuda:N', 'ptx' or 'cpu', got {device!r}")


def _on_device(key):
    """The context to compile a "cuda:N" kernel in: torch.cuda.device(N), so
    that libfa3 sees device N's context as current."""
    index = int(key[5:])
    torch = sys.modules.get("torch")
    if torch is None:
        if index != 0:
            raise ValueError(f"compiling for {key} needs torch (to select the device); import torch first")
        return contextlib.nullcontext()
    count = torch.cuda.device_count()
    if count == 0:  # no usable driver or device: libfa3 reports the driver's error
        return contextlib.nullcontext()
    if index >= count:
        raise ValueError(f"{key} does not exist: torch sees {count} CUDA device(s)")
    return torch.cuda.device(index)


def get_mlir(source, function, device, direction, block_m=0, block_n=0):
    """The compiled object for `function` of the MLIR `source`: a
    `_fa3.CpuFunction` (device "cpu"), a `_fa3.CudaKernel` (device "cuda:N":
    loaded on device N; "ptx": PTX only) or, for direction "quantize", a
    `_fa3.QuantizeKernel`. `direction` is "fwd", "bwd" or "quantize"."""
    device = device_key(device)
    key = (source, function, device, direction, block_m, block_n)
    with _lock:
        obj = _cache.get(key)
        if obj is not None:
            _stats["hits"] += 1
            return obj
    m = _module()
    if device == "cpu":
        obj = m.CpuFunction(source, function, block_m, block_n)
    elif direction == "quantize":
        if device == "ptx":
            obj = m.CudaKernel(source, function, m.CudaKernel.Kind.PTX_ONLY, 0, 0)
        else:
            with _on_device(device):
                obj = m.QuantizeKernel(source, function)
    elif device == "ptx":
        obj = m.CudaKernel(source, function, m.CudaKernel.Kind.PTX_ONLY, block_m, block_n)
    else:
        kind = m.CudaKernel.Kind.FORWARD if direction == "fwd" else m.CudaKernel.Kind.BACKWARD
        with _on_device(device):
            obj = m.CudaKernel(source, function, kind, block_m, block_n)
        if obj.device != int(device[5:]):
            raise RuntimeError(f"fa3 loaded the kernel on cuda:{obj.device}, not on {device}")
    with _lock:
        _stats["misses"] += 1
        _stats["compile_ms"].append(obj.compile_ms)
        return _cache.setdefault(key, obj)


def get(spec, device, direction, schedule=None):
    """`get_mlir` of the function fa3 compiles for the AttentionSpec `spec`
    (the forward with `schedule` written into its attention, if given; else
    the compiler's cost model picks it)."""
    source = spec.forward_mlir(schedule) if direction == "fwd" else spec.backward_mlir()
    function = "attention" if direction == "fwd" else "attention_grad"
    return get_mlir(source, function, device, direction)


def quantize_mlir(dtype, num_heads, num_groups, head_dim, hadamard_seed=None):
    """`@quantize(x) -> (x8, descale)`: fa3.quantize of a [B, S, H, D] tensor
    into e4m3 with one descale per (batch, group of H / G heads)."""
    x = f"tensor<?x?x{num_heads}x{head_dim}x{dtype}>"
    x8 = f"tensor<?x?x{num_heads}x{head_dim}xf8E4M3FN>"
    d = f"tensor<?x{num_groups}xf32>"
    attrs = "" if hadamard_seed is None else f" {{hadamard_seed = {int(hadamard_seed)} : i64}}"
    return (f"func.func @quantize(%x: {x}) -> ({x8}, {d}) {{\n"
            f"  %x8, %d = fa3.quantize %x{attrs} : {x} -> {x8}, {d}\n"
            f"  return %x8, %d : {x8}, {d}\n}}\n")


_schedules = {}


def _forward_fields(head_dim, causal, rows, seq_k, fp8=False):
    """The cost model's forward schedule fields for `rows` query rows of
    one head and `seq_k` keys (memoized)."""
    key = (head_dim, causal, rows, seq_k, fp8)
    fields = _schedules.get(key)
    if fields is None:
        fields = _schedules[key] = dict(_module().select_forward_schedule(head_dim, fp8, causal, rows, seq_k))
    return fields


def forward_schedule_fields(spec, seq_q, seq_k):
    """The fields (a dict, see `schedules.schedule`) of `forward_schedule`'s
    schedule for a 16-bit or FP8 forward: the cost model's for seq_q rows
    (seq_q·G with PackGQA) and seq_k keys."""
    rows = seq_q * (spec.num_heads // spec.num_kv_heads) if spec.pack_gqa else seq_q
    fields = dict(_forward_fields(spec.head_dim, spec.causal, rows, seq_k, bool(spec.fp8)))
    if spec.dropout:
        # As fa3-select-schedule: dropout's mask is built in the plain key
        # loop, not in the intra-warpgroup overlap's rotated one.
        fields["intra_wg_overlap"] = False
    return fields


def forward_schedule(spec, seq_q, seq_k):
    """The `#fa3.schedule` the cost model (fa3-select-schedule's, through
    fa3._fa3) picks for the CUDA forward of `spec` at query length `seq_q`
    and key length `seq_k`, to be written into the compiled fa3.attention;
    None where the compiler picks it after the IR is rewritten (the
    fa3-cast-fp8 chain, whose attention becomes FP8). With PackGQA a head's
    tiles hold the Hq / Hkv heads of its group: the model sees seq_q times
    as many rows."""
    if spec.cast_fp8:
        return None
    from .schedules import schedule  # noqa: PLC0415 (schedules imports _jit)
    return schedule(**forward_schedule_fields(spec, seq_q, seq_k))


def should_pack_gqa(spec, seq_q, seq_k):
    """fa3's PackGQA rule for the CUDA forward of `spec` (unpacked) at these
    lengths: FlashAttention-3's, with the query tile the cost model picks
    for the unpacked attention."""
    block_m = _forward_fields(spec.head_dim, spec.causal, seq_q, seq_k)["block_m"]
    return _module().should_pack_gqa(seq_q, spec.num_heads // spec.num_kv_heads, block_m)


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
