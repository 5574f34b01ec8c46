"""fa3's forward beside cuDNN's under a sustained load, with the SM clock,
power draw and temperature sampled: what a short benchmark window cannot
show on a GPU that runs at its power limit.

Each side runs back to back for --seconds (after a warm-up), the sides
alternating for --rounds rounds, while `nvidia-smi` samples the GPU every
100 ms; a line per side and round gives the time per call, TFLOP/s and the
clock/power/temperature range over the window. The shape is the FA3 paper's
for (d, seqlen) (bench_attention.py's rows).

Usage: python bench/bench_sustained.py [--d 128] [--seqlen 4096] [--causal]
       [--seconds 4] [--rounds 2] [--out DIR]   (needs torch, a CUDA GPU and nvidia-smi)
"""
import argparse
import pathlib
import subprocess
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from profile_common import paper_shape
import fa3  # noqa: E402 (profile_common sets the path)


def sample_gpu():
    """An nvidia-smi process printing clock (MHz), power (W) and temperature
    (C) every 100 ms."""
    return subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                             "--format=csv,noheader,nounits", "-lms", "100"],
                            stdout=subprocess.PIPE, text=True)


def run_window(fn, seconds):
    """Calls `fn` back to back for `seconds`; (ms per call, samples)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    monitor = sample_gpu()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls, t0 = 0, time.time()
    start.record()
    while time.time() - t0 < seconds:
        for _ in range(20):
            fn()
        calls += 20
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    monitor.terminate()
    # The first samples can predate the window's load.
    lines = monitor.communicate()[0].strip().splitlines()[5:]
    samples = [tuple(float(x) for x in line.split(",")) for line in lines if line.count(",") == 2]
    return start.elapsed_time(end) / calls, samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    b, h, s, d = paper_shape(args)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    flops = 4 * b * h * s * s * d // (2 if args.causal else 1)

    def fa3_call():
        fa3.attention(q, k, v, causal=args.causal)

    def cudnn_call():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal)

    lines = [f"sustained forward, B={b} H={h} S={s} d={d} causal={args.causal}, {args.seconds:g} s a window — "
             f"{torch.cuda.get_device_name()}, torch {torch.__version__}"]
    print(lines[0], flush=True)
    for _ in range(args.rounds):
        for name, fn in (("fa3", fa3_call), ("cuDNN", cudnn_call)):
            ms, samples = run_window(fn, args.seconds)
            clock, power, temp = zip(*samples) if samples else ((0,), (0,), (0,))
            line = (f"{name}: {ms * 1e3:.1f} us/call, {flops / ms / 1e9:.0f} TFLOP/s, SM clock "
                    f"{min(clock):.0f}-{max(clock):.0f} MHz (mean {sum(clock) / len(clock):.0f}), power "
                    f"{sum(power) / len(power):.0f} W (max {max(power):.0f}), {max(temp):.0f} C")
            print(line, flush=True)
            lines.append(line)
    if args.out:
        pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(args.out) / "sustained.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
