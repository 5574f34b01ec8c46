"""The cost of fa3-cast-fp8's chain on the H200: an attention marked
`fp8 = #fa3.fp8<...>` run by fa3-run --device=cuda (Hadamard kernel,
quantization kernels, V' layout kernel, FP8 attention) next to the FP8
attention on inputs quantized beforehand and the bf16 attention, all timed
by fa3-run's device events (median of N runs after a warm-up), at FA3
paper shapes (16k tokens, hidden 2048).

    python bench/bench_cast_fp8.py --out DIR [--runs 20]

Writes DIR/cast-fp8.json and prints a table. TFLOP/s counts the attention's
4·B·H·Sq·Sk·D FLOPs (half when causal) for every variant, so the chain's
extra kernels show up as a lower rate.
"""

import argparse
import json
import os
import re
import subprocess
import tempfile

import numpy as np

SHAPES = [  # seqlen, head_dim, causal
    (8192, 128, False),
    (8192, 128, True),
    (8192, 256, False),
    (2048, 128, False),
]


def mlir(variant, h, d, causal):
    bf = f"tensor<?x?x{h}x{d}xbf16>"
    lse = f"tensor<?x{h}x?xf32>"
    attrs = ["causal"] if causal else []
    if variant.startswith("cast"):
        attrs.append(f"fp8 = #fa3.fp8<hadamard = {str(variant == 'cast+hadamard').lower()}>")
    a = " {" + ", ".join(attrs) + "}" if attrs else ""
    if variant == "fp8":
        f8 = bf.replace("bf16", "f8E4M3FN")
        dt = f"tensor<?x{h}xf32>"
        return (f"func.func @f(%q: {f8}, %k: {f8}, %v: {f8}, %qd: {dt}, %kd: {dt}, %vd: {dt}) -> ({bf}, {lse}) {{\n"
                f"  %o, %l = fa3.attention %q, %k, %v, %qd, %kd, %vd{a} : ({f8}, {f8}, {f8}, {dt}, {dt}, {dt})"
                f" -> ({bf}, {lse})\n  return %o, %l : {bf}, {lse}\n}}\n")
    return (f"func.func @f(%q: {bf}, %k: {bf}, %v: {bf}) -> ({bf}, {lse}) {{\n"
            f"  %o, %l = fa3.attention %q, %k, %v{a} : ({bf}, {bf}, {bf}) -> ({bf}, {lse})\n"
            f"  return %o, %l : {bf}, {lse}\n}}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    fa3_run = os.environ.get("FA3_RUN", "fa3-run")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for s, d, causal in SHAPES:
            b, h = 16384 // s, 2048 // d
            rng = np.random.default_rng(0)
            x = {n: rng.standard_normal((b, s, h, d)).astype(np.float32) for n in "qkv"}
            for n, a in x.items():
                np.save(f"{tmp}/{n}.npy", a)
            # Pre-quantized inputs (float32 values that fa3-run rounds to e4m3).
            for n, a in x.items():
                amax = np.abs(a).max(axis=(1, 3))
                descale = (amax / 448).astype(np.float32)
                np.save(f"{tmp}/{n}8.npy", np.clip(a / descale[:, None, :, None], -448, 448))
                np.save(f"{tmp}/{n}d.npy", descale)
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            for variant in ("bf16", "fp8", "cast", "cast+hadamard"):
                with open(f"{tmp}/f.mlir", "w") as f:
                    f.write(mlir(variant, h, d, causal))
                names = ["q8", "k8", "v8", "qd", "kd", "vd"] if variant == "fp8" else ["q", "k", "v"]
                cmd = [fa3_run, f"{tmp}/f.mlir", "--function=f", "--device=cuda", f"--benchmark={args.runs}"]
                cmd += [f"--input=@{tmp}/{n}.npy" for n in names]
                cmd += [f"--output=@{tmp}/o.npy", f"--output=@{tmp}/l.npy"]
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                if proc.returncode != 0:
                    raise SystemExit(f"{variant} s{s} d{d}: {proc.stderr}")
                ms = float(re.search(r"median of \d+ runs: ([0-9.]+) ms", proc.stdout).group(1))
                kernels = re.findall(r"kernel: (\S+)", proc.stdout)
                row = dict(seqlen=s, batch=b, heads=h, head_dim=d, causal=causal, variant=variant,
                           ms=ms, tflops=flops / ms / 1e9, kernels=kernels)
                rows.append(row)
                print(f"s{s:5d} d{d:3d} {'causal' if causal else 'full  '} {variant:14s} "
                      f"{ms:8.3f} ms {row['tflops']:7.1f} TFLOP/s  ({len(kernels)} steps)", flush=True)
    with open(os.path.join(args.out, "cast-fp8.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
