"""The cost of attention dropout: fa3.attention with dropout_p = 0 and 0.1
beside PyTorch SDPA's FLASH backend (FlashAttention-2, the only SDPA
backend of the three with dropout on bf16 CUDA tensors besides the
memory-efficient one) with the same dropout_p, bf16, on FA3-paper shapes
(16k tokens: batch = 16384 // seqlen, hidden 2048: heads = 2048 // d).

Timed through the public API, as a training step calls it: the forward
alone under torch.no_grad(), and forward + backward (torch.autograd.grad of
the output with a fixed dO), medians of triton.testing.do_bench (L2 flushed
between runs). Useful TFLOP/s count the attention FLOPs only (forward
4·B·H·S²·D, backward 2.5 × that, halved when causal), so dropout's own
work shows as lower throughput. fa3 draws no seed per call here
(dropout_seed fixed): the time is the kernels' and the dispatch's.

Usage: python bench/bench_dropout.py [--out DIR] [--dims 64,128,256] [--seqlens 2048,8192] [--p 0.1]
Writes DIR/bench-dropout.json and prints a table.
"""
import argparse
import datetime
import json
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
import fa3  # noqa: E402


def flops(b, h, s, d, causal, backward):
    f = 4 * b * h * s * s * d * (3.5 if backward else 1.0)
    return f / 2 if causal else f


def fa3_step(q, k, v, do, causal, p, backward):
    kwargs = dict(causal=causal)
    if p:
        kwargs.update(dropout_p=p, dropout_seed=1234)
    def run():
        if not backward:
            with torch.no_grad():
                return fa3.attention(q, k, v, **kwargs)
        out = fa3.attention(q, k, v, **kwargs)
        return torch.autograd.grad(out, (q, k, v), do)
    return run


def flash_step(q, k, v, do, causal, p, backward):
    qt, kt, vt, dot = (x.transpose(1, 2) for x in (q, k, v, do))

    def run():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            if not backward:
                with torch.no_grad():
                    return F.scaled_dot_product_attention(qt, kt, vt, dropout_p=p, is_causal=causal)
            out = F.scaled_dot_product_attention(qt, kt, vt, dropout_p=p, is_causal=causal)
            return torch.autograd.grad(out, (qt, kt, vt), dot)
    return run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="gpu-out")
    parser.add_argument("--dims", default="64,128,256")
    parser.add_argument("--seqlens", default="2048,8192")
    parser.add_argument("--p", type=float, default=0.1)
    args = parser.parse_args()
    rows = []
    print(f"{'d':>4} {'causal':>6} {'BxHxS':>12} {'pass':>8} | {'fa3 p=0':>8} {'fa3 p':>8} {'cost':>6} | "
          f"{'FLASH p=0':>9} {'FLASH p':>8} {'cost':>6} | fa3/FLASH at p")
    for d in (int(x) for x in args.dims.split(",")):
        for s in (int(x) for x in args.seqlens.split(",")):
            b, h = max(1, 16384 // s), 2048 // d
            for causal in (False, True):
                torch.manual_seed(0)
                q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
                for x in (q, k, v):
                    x.requires_grad_(True)
                for backward in (False, True):
                    f = flops(b, h, s, d, causal, backward)
                    ms = {}
                    for name, step in (("fa3", fa3_step), ("flash", flash_step)):
                        for p in (0.0, args.p):
                            ms[(name, p)] = do_bench(step(q, k, v, do, causal, p, backward), warmup=25, rep=100)
                    tf = {key: f / (t * 1e-3) / 1e12 for key, t in ms.items()}
                    row = dict(d=d, causal=causal, b=b, h=h, s=s, direction="fwd+bwd" if backward else "fwd",
                               p=args.p, tflops={f"{n}_p{p}": v for (n, p), v in tf.items()},
                               ms={f"{n}_p{p}": v for (n, p), v in ms.items()})
                    rows.append(row)
                    cost_fa3 = ms[("fa3", args.p)] / ms[("fa3", 0.0)] - 1
                    cost_flash = ms[("flash", args.p)] / ms[("flash", 0.0)] - 1
                    print(f"{d:>4} {str(causal):>6} {f'{b}x{h}x{s}':>12} {row['direction']:>8} | "
                          f"{tf[('fa3', 0.0)]:8.0f} {tf[('fa3', args.p)]:8.0f} {cost_fa3:+6.0%} | "
                          f"{tf[('flash', 0.0)]:9.0f} {tf[('flash', args.p)]:8.0f} {cost_flash:+6.0%} | "
                          f"{tf[('fa3', args.p)] / tf[('flash', args.p)]:.2f}", flush=True)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(), gpu=torch.cuda.get_device_name(),
                torch=torch.__version__)
    (out / "bench-dropout.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
