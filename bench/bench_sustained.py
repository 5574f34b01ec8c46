"""fa3's forward beside cuDNN's under a sustained load, with the SM clock,
power draw and temperature sampled: what a short benchmark window cannot
show on a GPU that runs at its power limit.

Each side runs back to back for --seconds (after a warm-up), the sides
alternating for --rounds rounds, while `nvidia-smi` samples the GPU every
100 ms; a line per side and round gives the time per call, TFLOP/s and the
clock/power/temperature range over the window. The shape is the FA3 paper's
for (d, seqlen) (bench_attention.py's rows).

`--rows` runs several shapes in one process (`d:seqlen` or `d:seqlen:c`
for causal, comma-separated; `vit:S` is the ViT shape B = 128, H = 12,
d = 64 at S tokens) and ends with a table of fa3 / cuDNN, the ratio of
the two sides' summed times over the rounds. `--flash` adds SDPA's FLASH
backend as a third side in the same alternation (its own TFLOP/s column).

`--variant NAME=field:value/field:value` (repeatable) adds an fa3 side per
variant: the row's length-bucket schedule (the kernel fa3.attention runs)
with those `#fa3.schedule` fields changed, launched into preallocated
outputs (Kernel.launch_into); the bucket's own kernel then runs the same
way as the side `fa3:default`, so the sides differ in the schedule only.
Each variant's output is checked against the default kernel's first.

`--fp8` makes every fa3 side the FP8 forward (e4m3 q, k, v with descales,
the launch including the V' layout kernel, as bench_attention.py --fp8),
the length bucket's FP8 schedule and its variants; cuDNN stays the bf16
attention of the same shape (SDPA has no FP8 attention), so its column is
the reference speed and the ratio reads "FP8 over cuDNN bf16".

Usage: python bench/bench_sustained.py [--d 128] [--seqlen 4096] [--causal]
       [--rows 64:512:c,128:4096,vit:197] [--variant plain=persistent:0 ...] [--fp8]
       [--flash] [--seconds 4] [--rounds 2] [--out DIR]
       (needs torch, a CUDA GPU and nvidia-smi)
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
from bench_attention import fp8_launch_fn, fp8_quantized, mlir_for  # noqa: E402
from fa3 import _jit, schedules  # noqa: E402
from fa3._spec import AttentionSpec  # noqa: E402


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


def parse_rows(text):
    """[(batch, heads, seqlen, d, causal)] of --rows (see the docstring)."""
    rows = []
    for item in text.split(","):
        fields = item.strip().split(":")
        if fields[0] == "vit" and len(fields) == 2:
            rows.append((128, 12, int(fields[1]), 64, False))
            continue
        if len(fields) not in (2, 3) or (len(fields) == 3 and fields[2] != "c"):
            raise SystemExit(f"--rows: {item!r} is not d:seqlen, d:seqlen:c or vit:S")
        d, s = int(fields[0]), int(fields[1])
        rows.append((16384 // s, 2048 // d, s, d, len(fields) == 3))
    return rows


def parse_variants(items):
    """{name: {field: int}} of the --variant arguments."""
    variants = {}
    for item in items:
        name, _, fields = item.partition("=")
        try:
            variants[name] = {f.split(":")[0]: int(f.split(":")[1]) for f in fields.split("/")}
        except (IndexError, ValueError):
            raise SystemExit(f"--variant: {item!r} is not NAME=field:value/field:value") from None
    return variants


def variant_fields(base, name, changes):
    """The schedule fields `base` with one --variant's changes."""
    fields = dict(base)
    for field, value in changes.items():
        if field not in fields:
            raise SystemExit(f"--variant {name}: no schedule field {field!r} (fields: {', '.join(fields)})")
        fields[field] = type(fields[field])(value)
    return fields


def fp8_launcher(q, k, v, causal, schedule):
    """A call of the FP8 forward of `schedule` on q, k, v quantized as
    bench_attention.py --fp8 does, into its own output; (call, output)."""
    b, s, h, d = q.shape
    spec = AttentionSpec("f8E4M3FN", h, h, d, d, causal, 1.0 / d ** 0.5)
    kernel = _jit.get(spec, f"cuda:{q.device.index or 0}", "fwd", schedule=schedule)
    out = torch.empty_like(q)
    lse = torch.empty(b, h, s, device=q.device, dtype=torch.float32)
    return fp8_launch_fn(kernel, *fp8_quantized(q, k, v), out, lse), out


def variant_sides(q, k, v, causal, variants, fp8=False):
    """[(name, call)]: the length bucket's kernel and each variant of its
    schedule (16-bit, or with `fp8` the FP8 forward), launched into
    preallocated outputs."""
    b, s, h, d = q.shape
    dtype = "f8E4M3FN" if fp8 else "bf16"
    base = _jit.forward_schedule_fields(AttentionSpec(dtype, h, h, d, d, causal), s, s)
    sides, reference = [], None
    for name, changes in {"default": {}, **variants}.items():
        schedule = schedules.schedule(**variant_fields(base, name, changes))
        if fp8:
            call, out = fp8_launcher(q, k, v, causal, schedule)
        else:
            kernel = fa3.compile_mlir(mlir_for(h, d, causal, schedule), "attn")
            out, lse = torch.empty_like(q), torch.empty(b, h, s, device=q.device, dtype=torch.float32)

            def call(kernel=kernel, out=out, lse=lse):
                kernel.launch_into(q, k, v, out, lse)
        call()
        if reference is None:
            reference = out.float()
        else:
            # Schedules round P (e4m3: to 3 mantissa bits) at other running
            # maxima, so FP8 variants agree to a bound, not to the bit.
            bound = 0.1 * reference.abs().max().item() if fp8 else 2e-2
            err = (out.float() - reference).abs().max().item()
            if err > bound:
                raise SystemExit(f"variant {name} disagrees with the default kernel: max |diff| {err:.3g} "
                                 f"(bound {bound:.3g})")
        sides.append((f"fa3{'-fp8' if fp8 else ''}:{name}", call))
    return sides


def sustained_row(b, h, s, d, causal, seconds, rounds, lines, variants=None, fp8=False, flash=False):
    """Alternating windows of fa3 (fa3.attention, or with `variants` or
    `fp8` the variant_sides), cuDNN and, with `flash`, SDPA's FLASH backend
    on one shape; {side: ms per call} averaged over the rounds."""
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    flops = 4 * b * h * s * s * d // (2 if causal else 1)

    def fa3_call():
        fa3.attention(q, k, v, causal=causal)

    def cudnn_call():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

    def flash_call():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

    sides = variant_sides(q, k, v, causal, variants or {}, fp8) if variants or fp8 else [("fa3", fa3_call)]
    sides.append(("cuDNN", cudnn_call))
    if flash:
        sides.append(("FLASH", flash_call))

    line = (f"sustained forward, B={b} H={h} S={s} d={d} causal={causal}, {seconds:g} s a window — "
            f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(line, flush=True)
    lines.append(line)
    total = {name: 0.0 for name, _ in sides}
    for _ in range(rounds):
        for name, fn in sides:
            ms, samples = run_window(fn, seconds)
            total[name] += ms
            clock, power, temp = zip(*samples) if samples else ((0,), (0,), (0,))
            line = (f"{name}: {ms * 1e3:.1f} us/call, {flops / ms / 1e9:.0f} TFLOP/s, SM clock "
                    f"{min(clock):.0f}-{max(clock):.0f} MHz (mean {sum(clock) / len(clock):.0f}), power "
                    f"{sum(power) / len(power):.0f} W (max {max(power):.0f}), {max(temp):.0f} C")
            print(line, flush=True)
            lines.append(line)
    return flops, {name: ms / rounds for name, ms in total.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--rows", default=None, help="shapes: d:seqlen[:c] or vit:S, comma-separated")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=field:value/...: an fa3 side with the bucket schedule's fields changed")
    ap.add_argument("--fp8", action="store_true", help="fa3 sides run the FP8 forward (cuDNN stays bf16)")
    ap.add_argument("--flash", action="store_true", help="a third side: SDPA's FLASH backend (its own column)")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.rows:
        rows = parse_rows(args.rows)
    else:
        b, h, s, d = paper_shape(args)
        rows = [(b, h, s, d, args.causal)]
    variants = parse_variants(args.variant)
    prefix = "fa3-fp8" if args.fp8 else "fa3"
    names = ([prefix] if not (variants or args.fp8)
             else [f"{prefix}:default", *(f"{prefix}:{name}" for name in variants)])
    lines = []
    baselines = ["cuDNN", "FLASH"] if args.flash else ["cuDNN"]
    table = ["", "| d | causal | B x H x S | " + " | ".join(f"{n} TFLOP/s" for n in names + baselines)
             + " | " + " | ".join(f"{n} / cuDNN" for n in names) + " |",
             "| --- " * (3 + 2 * len(names) + len(baselines)) + "|"]
    for b, h, s, d, causal in rows:
        flops, ms = sustained_row(b, h, s, d, causal, args.seconds, args.rounds, lines, variants, args.fp8,
                                  args.flash)
        table.append(f"| {d} | {'yes' if causal else 'no'} | {b}x{h}x{s} | "
                     + " | ".join(f"{flops / ms[n] / 1e9:.0f}" for n in names + baselines) + " | "
                     + " | ".join(f"{ms['cuDNN'] / ms[n]:.2f}" for n in names) + " |")
    if len(rows) > 1 or variants or args.fp8:
        print("\n".join(table), flush=True)
        lines += table
    if args.out:
        pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(args.out) / "sustained.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
