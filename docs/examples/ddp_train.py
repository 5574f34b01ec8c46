"""Data-parallel training with fa3 under torch.distributed: a small
random-init causal transformer whose attention is fa3.attention, wrapped in
DistributedDataParallel (one process per rank, each with its part of the
global batch). Rank 0 then trains the same model (same init, same global
batches) in one process and compares the two loss curves.

    torchrun --nproc_per_node=2 docs/examples/ddp_train.py                 # NCCL, one GPU per rank
    torchrun --nproc_per_node=2 docs/examples/ddp_train.py --backend gloo  # ranks may share a GPU

DDP averages the ranks' gradients, which equals the gradient of the global
batch's mean loss; the curves differ only by rounding (fa3's backward adds
dQ with atomics, so neither run is bit-reproducible): the check allows
2e-2 per step. NCCL_NVLS_ENABLE=0 is set unless set already.
"""
import argparse
import os
import pathlib
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import fa3  # noqa: E402


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, s, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, c // self.heads).unbind(2)
        y = fa3.attention(q, k, v, causal=True)  # [B, S, H, D]: fa3's layout, no transposes
        x = x + self.proj(y.reshape(b, s, c))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab=256, dim=256, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def batches(steps, global_batch, seqlen, vocab, device):
    """A learnable synthetic task (each token repeats the one 7 back), the
    same on every rank."""
    g = torch.Generator(device="cpu").manual_seed(1234)
    for _ in range(steps):
        base = torch.randint(0, vocab, (global_batch, seqlen + 7), generator=g)
        tokens = base.clone()
        tokens[:, 7:] = base[:, :-7]
        yield tokens[:, :-1].to(device), tokens[:, 1:].to(device)


def train(model, data, rank=0, world=1):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for inputs, targets in data:
        per = inputs.shape[0] // world
        inputs, targets = inputs[rank * per:(rank + 1) * per], targets[rank * per:(rank + 1) * per]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        if world > 1:  # the global batch's mean loss, as the single run sees it
            dist.all_reduce(total)
            total /= world
        losses.append(total.item())
    return losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=512)
    args = ap.parse_args()

    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    torch.cuda.set_device(device)
    if args.global_batch % world:
        raise SystemExit(f"--global-batch {args.global_batch} must be a multiple of the {world} ranks")

    torch.manual_seed(0)
    model = TinyLM().to(device)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    curve = train(ddp, batches(args.steps, args.global_batch, args.seqlen, 256, device), rank, world)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if rank == 0:
        single = TinyLM().to(device)
        single.load_state_dict(init)
        t1 = time.perf_counter()
        reference = train(single, batches(args.steps, args.global_batch, args.seqlen, 256, device))
        torch.cuda.synchronize()
        single_seconds = time.perf_counter() - t1
        tokens = args.steps * args.global_batch * args.seqlen
        worst = max(abs(a - b) for a, b in zip(curve, reference))
        print(f"DDP: {world} ranks ({args.backend}), {tokens / seconds:,.0f} tokens/s; one process: "
              f"{tokens / single_seconds:,.0f} tokens/s (first step's compile included in both)")
        print(f"loss {curve[0]:.4f} -> {curve[-1]:.4f} (DDP), {reference[0]:.4f} -> {reference[-1]:.4f} "
              f"(one process); max |difference| {worst:.3g}")
        ok = worst <= 2e-2 and curve[-1] < curve[0]
        print("check:", "ok" if ok else "FAILED")
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0 and not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
