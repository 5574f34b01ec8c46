"""Host time per cached call: what a small attention costs the CPU before the
GPU does any work, fa3 beside PyTorch SDPA (FLASH and cuDNN backends) in the
same process.

For each shape, every path is warmed up (kernels compiled and cached), then
timed as the median over 25 repetitions of `calls` back-to-back calls
(`calls` stays far below the launch queue's depth, so the host never waits
for the GPU inside a repetition) between a `torch.cuda.synchronize()` and the
loop's end: the host time of one call. The GPU time of the same call, from
CUDA events around a synchronized loop, is reported beside it, so a reader
can see whether the host or the GPU bounds the call.

Paths:
* fa3.attention (forward; inputs that need no grad),
* fa3.attention + backward (autograd; `out.backward(dO)`),
* the raw launch: `fa3.compile(...)` then `Kernel.launch_into(...)` with
  preallocated outputs (the C API plus pybind11, the floor under the above),
* a CUDA-graph replay of fa3's forward and backward (`torch.cuda.graph`),
* SDPA under sdpa_kernel([FLASH]) and sdpa_kernel([CUDNN]), forward and
  forward + backward, on the same tensors (B, H, S, D views).

Usage: python bench/bench_dispatch.py [--out DIR]
Writes DIR/dispatch.json and DIR/dispatch.md.
"""
import argparse
import datetime
import json
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
import fa3  # noqa: E402

SHAPES = [  # (batch, seqlen, heads, head_dim): small enough to be host-bound
    (1, 128, 16, 64),
    (1, 128, 8, 128),
    (4, 512, 16, 64),
]


def host_us(fn, calls=200, reps=25):
    """Median host microseconds per call of `fn` over `reps` loops of
    `calls` calls, each loop started on an idle GPU."""
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(samples)


def gpu_us(fn, calls=200):
    """Wall microseconds per call of a synchronized loop (host and GPU)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


def measure(fn):
    for _ in range(20):  # warm-up: compiles, caches, allocator pools
        fn()
    torch.cuda.synchronize()
    return {"host_us": host_us(fn), "wall_us": gpu_us(fn)}


def sdpa(backend, q, k, v):
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

    def fn():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(qt, kt, vt)
    return fn


def sdpa_train(backend, q, k, v, do):
    qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
    dot = do.transpose(1, 2)

    def fn():
        with sdpa_kernel([backend]):
            F.scaled_dot_product_attention(qt, kt, vt).backward(dot)
    return fn


def graph_replay(q, k, v, do):
    """fa3 forward + backward captured once, replayed per call."""
    qg, kg, vg = (x.detach().clone().requires_grad_() for x in (q, k, v))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fa3.attention(qg, kg, vg).backward(do)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fa3.attention(qg, kg, vg).backward(do)
    return graph.replay


def row(b, s, h, d):
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    r = {"batch": b, "seqlen": s, "heads": h, "d": d}
    kernel = fa3.compile("bf16", h, d)
    out = torch.empty_like(q)
    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    paths = {
        "fa3_launch": lambda: kernel.launch_into(q, k, v, out, lse),
        "fa3_fwd": lambda: fa3.attention(q, k, v),
        "flash_fwd": sdpa(SDPBackend.FLASH_ATTENTION, q, k, v),
        "cudnn_fwd": sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v),
    }
    qr, kr, vr = (x.detach().clone().requires_grad_() for x in (q, k, v))
    paths["fa3_fwd_bwd"] = lambda: fa3.attention(qr, kr, vr).backward(do)
    paths["flash_fwd_bwd"] = sdpa_train(SDPBackend.FLASH_ATTENTION, q, k, v, do)
    paths["cudnn_fwd_bwd"] = sdpa_train(SDPBackend.CUDNN_ATTENTION, q, k, v, do)
    paths["fa3_graph_fwd_bwd"] = graph_replay(q, k, v, do)
    for name, fn in paths.items():
        try:
            r[name] = measure(fn)
        except Exception as e:  # noqa: BLE001 - a failing path is a reported cell, not a crash
            r[name] = {"error": repr(e)[:300]}
        print(b, s, h, d, name, r[name], flush=True)
    return r


def _cell(x):
    if "error" in x:
        return "error"
    return f"{x['host_us']:.1f} / {x['wall_us']:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = [row(*shape) for shape in SHAPES]
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "fa3": fa3.__version__,
            "commit": (ROOT / ".bundle" / "COMMIT").read_text().strip() if (ROOT / ".bundle" / "COMMIT").exists()
            else "unknown"}
    (out / "dispatch.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    names = [k for k in rows[0] if isinstance(rows[0][k], dict)]
    lines = [f"Host µs / wall µs per call ({meta['gpu']}, {meta['date']}, bundle {meta['commit']})", "",
             "| B, S, H, D | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for r in rows:
        lines.append(f"| {r['batch']}, {r['seqlen']}, {r['heads']}, {r['d']} | "
                     + " | ".join(_cell(r[n]) for n in names) + " |")
    (out / "dispatch.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
