"""Where the time of the Llama-shaped attention step goes (bench_attention.py
--llama: B=2, S=4096, GQA 32:8, d128, causal, forward + backward through
autograd): torch.profiler's CUDA time per kernel, fa3.attention beside SDPA
cuDNN, over `--steps` steps after a warm-up.

  python bench/profile_step.py [--steps 20]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import profile_common  # noqa: F401 (puts python/ on the path)
import fa3  # noqa: E402


def kernel_table(step, steps):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=14, max_name_column_width=70))
    print(f"  (totals are over {steps} steps)")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    b, s, hq, hkv, d = 2, 4096, 32, 8, 128
    torch.manual_seed(0)
    q, do = (torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    print("fa3.attention (forward + backward):")
    kernel_table(lambda: torch.autograd.grad(fa3.attention(*leaves, causal=True), leaves, do), args.steps)

    sdpa = [x.detach().clone().requires_grad_() for x in (q, k, v)]

    def cudnn_step():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            out = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in sdpa), is_causal=True,
                                                 enable_gqa=True)
        return torch.autograd.grad(out, sdpa, do.transpose(1, 2))
    print("SDPA cuDNN (forward + backward):")
    kernel_table(cudnn_step, args.steps)


if __name__ == "__main__":
    main()
