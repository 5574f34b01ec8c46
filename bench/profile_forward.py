"""Launches one forward kernel a few times on the FA3-paper shape of
(d, seqlen), for a profiler to pick one launch (see docs/GPU.md):

  ncu --clock-control none -k regex:fa3_fwd --launch-skip 2 --launch-count 1 \\
      python bench/profile_forward.py --d 128 --seqlen 8192 [--causal] [--schedule '#fa3.schedule<...>']

Without --schedule the kernel is the one fa3.attention runs for the shape
(its length bucket's schedule). --cudnn launches PyTorch's cuDNN SDPA on the
same shape instead, for the peer's profile (`-k regex:cudnn|sm90`). --fp8
launches the FP8 (e4m3) forward of the shape through fa3.attention (its V'
layout kernel first: profile `-k regex:fa3_fwd_e4m3.*[^t]$` or skip it), or
with --schedule the FP8 kernel of that schedule.
"""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from profile_common import paper_shape, profile_parser
from bench_attention import mlir_for  # noqa: E402 (profile_common sets the path)
import fa3  # noqa: E402
from fa3 import _jit  # noqa: E402
from fa3._spec import AttentionSpec  # noqa: E402


def main():
    ap = profile_parser("profile PyTorch's cuDNN SDPA instead")
    ap.add_argument("--schedule", default=None)
    ap.add_argument("--fp8", action="store_true", help="the FP8 (e4m3) forward (its length bucket's schedule)")
    args = ap.parse_args()
    b, h, s, d = paper_shape(args)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    if args.fp8 and args.schedule:
        # The FP8 kernel of that schedule, launched as bench_sustained.py's
        # --variant sides launch it.
        from bench_sustained import fp8_launcher
        launch, _ = fp8_launcher(q, k, v, args.causal, args.schedule)
        for _ in range(args.launches):
            launch()
        torch.cuda.synchronize()
        print("FP8 forward launched", args.launches, "times with", args.schedule)
        return
    if args.fp8:
        q8, k8, v8 = ((x.float() * 64).to(torch.float8_e4m3fn) for x in (q, k, v))
        descale = torch.full((b, h), 1.0 / 64, device="cuda")
        for _ in range(args.launches):
            fa3.attention(q8, k8, v8, causal=args.causal, q_descale=descale, k_descale=descale,
                          v_descale=descale)
        torch.cuda.synchronize()
        print("FP8 forward launched", args.launches, "times")
        return
    if args.cudnn:
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for _ in range(args.launches):
                torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal)
        torch.cuda.synchronize()
        print("cuDNN SDPA launched", args.launches, "times")
        return
    schedule = args.schedule or _jit.forward_schedule(AttentionSpec("bf16", h, h, d, d, args.causal), s, s)
    kernel = fa3.compile_mlir(mlir_for(h, d, args.causal, schedule), "attn")
    o = torch.empty_like(q)
    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    for _ in range(args.launches):
        kernel.launch_into(q, k, v, o, lse)
    torch.cuda.synchronize()
    print(kernel.name, "launched", args.launches, "times with", schedule)


if __name__ == "__main__":
    main()
