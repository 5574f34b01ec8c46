"""Launches one fa3 forward kernel a few times on the FA3-paper shape of
(d, seqlen), for a profiler to pick one launch (see docs/GPU.md):

  ncu --clock-control none -k regex:fa3_fwd --launch-skip 2 --launch-count 1 \\
      python bench/profile_forward.py --d 128 --seqlen 8192 [--causal] [--schedule '#fa3.schedule<...>']
"""
import argparse
import pathlib
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))
from bench_attention import mlir_for  # noqa: E402
import fa3  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--schedule", default=None)
    ap.add_argument("--launches", type=int, default=4)
    args = ap.parse_args()
    s, d = args.seqlen, args.d
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    kernel = fa3.compile_mlir(mlir_for(h, d, args.causal, args.schedule), "attn")
    o = torch.empty_like(q)
    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    for _ in range(args.launches):
        kernel.launch_into(q, k, v, o, lse)
    torch.cuda.synchronize()
    print(kernel.name, "launched", args.launches, "times")


if __name__ == "__main__":
    main()
