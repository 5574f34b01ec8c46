"""Context-parallel (sequence-sharded) attention with fa3 under
torch.distributed: each rank holds a zig-zag shard of a long causal
sequence, all-gathers K and V, runs fa3 on its query chunks against every
visible key chunk and merges the partial results by their LSE
(fa3.distributed.context_parallel_attention). Rank 0 then checks the
output and the gradients (gathered from every rank) against fa3 on the
whole sequence in one process, and every rank reports its time.

    torchrun --nproc_per_node=2 docs/examples/context_parallel.py            # NCCL, one GPU per rank
    torchrun --nproc_per_node=2 docs/examples/context_parallel.py --backend gloo   # ranks may share a GPU

Keep NCCL's NVLink multicast off on the project's GPU machines
(NCCL_NVLS_ENABLE=0; this script sets it unless it is set).
"""
import argparse
import os
import pathlib
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import fa3  # noqa: E402
from fa3 import distributed  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--seqlen", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()

    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    torch.cuda.set_device(device)

    # The same full tensors on every rank (same seed); each keeps its shard.
    g = torch.Generator(device=device).manual_seed(0)
    s, h, hkv, d = args.seqlen, args.heads, args.kv_heads, args.head_dim
    q = torch.randn(1, s, h, d, device=device, generator=g, dtype=torch.bfloat16)
    k = torch.randn(1, s, hkv, d, device=device, generator=g, dtype=torch.bfloat16)
    v = torch.randn(1, s, hkv, d, device=device, generator=g, dtype=torch.bfloat16)
    do = torch.randn(1, s, h, d, device=device, generator=g, dtype=torch.bfloat16)
    local = [distributed.zigzag_shard(x, world, rank).detach().requires_grad_() for x in (q, k, v)]
    do_local = distributed.zigzag_shard(do, world, rank)

    def step():
        for x in local:
            x.grad = None
        out = distributed.context_parallel_attention(*local, causal=True)
        out.backward(do_local)
        return out

    out = step()  # compile and warm up
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        out = step()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) / args.iters * 1e3

    # Gather outputs and gradients to every rank; rank 0 compares.
    def gather(x):
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous())
        return distributed.zigzag_unshard(parts)

    full_out = gather(out.detach())
    full_grads = [gather(x.grad) for x in local]
    times = [None] * world
    dist.all_gather_object(times, ms)
    if rank == 0:
        whole = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        ref = fa3.attention(*whole, causal=True)
        ref.backward(do)
        errs = [(full_out.float() - ref.float()).abs().max().item()]
        errs += [(a.float() - b.grad.float()).abs().max().item() for a, b in zip(full_grads, whole)]
        scale = [ref.float().abs().max().item()] + [b.grad.float().abs().max().item() for b in whole]
        tokens = s / (max(times) / 1e3)
        print(f"context parallel: {world} ranks ({args.backend}), S={s}, H={h}:{hkv}, d={d}, causal; "
              f"fwd+bwd {max(times):.1f} ms per step (slowest rank), {tokens:,.0f} tokens/s")
        print("max |sharded - whole| for O, dQ, dK, dV: " + ", ".join(f"{e:.3g} (of {m:.3g})"
                                                                     for e, m in zip(errs, scale)))
        # bf16 outputs of different summation orders: within 2^-6 of each
        # tensor's largest entry (fa3 on the whole sequence is the yardstick;
        # test_shard_merge_gpu.py bounds both against float64).
        ok = all(e <= 2.0 ** -6 * m for e, m in zip(errs, scale))
        print("check:", "ok" if ok else "FAILED")
    dist.destroy_process_group()
    if rank == 0 and not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
