"""Launches the backward kernels a few times on the FA3-paper shape of
(d, seqlen), for a profiler to pick one launch of the main kernel (see
docs/GPU.md):

  ncu --clock-control none -k regex:'attn_grad$' --launch-skip 2 --launch-count 1 \\
      python bench/profile_backward.py --d 128 --seqlen 8192 [--causal]

The kernels are those bench_attention.py's backward rows time (its
`_grad_kernels`). --cudnn runs PyTorch's cuDNN SDPA backward on the same
shape instead, for the peer's profile.
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from profile_common import paper_shape, profile_parser
from bench_attention import _grad_kernels  # noqa: E402 (profile_common sets the path)


def main():
    args = profile_parser("profile PyTorch's cuDNN SDPA backward instead").parse_args()
    b, h, s, d = paper_shape(args)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    if args.cudnn:
        leaves = [x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v)]
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(*leaves, is_causal=args.causal)
        for _ in range(args.launches):
            torch.autograd.grad(out, leaves, do.transpose(1, 2), retain_graph=True)
        torch.cuda.synchronize()
        print("cuDNN SDPA backward launched", args.launches, "times")
        return
    fwd, bwd = _grad_kernels(h, d, args.causal)
    o = torch.empty_like(q)
    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    fwd.launch_into(q, k, v, o, lse)
    dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
    ws = torch.empty(max(bwd.workspace_bytes(b, s, s), 1), device="cuda", dtype=torch.uint8)
    for _ in range(args.launches):
        bwd.launch_grad_into(do, q, k, v, o, lse, dq, dk, dv, workspace=ws)
    torch.cuda.synchronize()
    print(bwd.name, "launched", args.launches, "times")


if __name__ == "__main__":
    main()
