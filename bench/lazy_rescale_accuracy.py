"""The bf16 forward's accuracy with and without lazy rescaling, on the GPU:
for each shape, max |O - float64 reference| over SDPA's (same inputs, an
explicit all-true mask, as test_attention_gpu.py compares), over 16 seeds,
with the cost model's dynamic-length schedule and rescale_threshold 0 and 8.

  python bench/lazy_rescale_accuracy.py     (after scripts/gpu/run.sh none)

docs/Performance.md quotes its output (2026-12-06).
"""
import math
import pathlib
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
from fa3 import _jit, schedules  # noqa: E402
from fa3._spec import AttentionSpec  # noqa: E402

DEV = "cuda"
SHAPES = ((1, 17, 4096, 8, 2, 256), (1, 4096, 4096, 16, 2, 256), (1, 17, 4096, 8, 2, 64))


def reference_f64(q, k, v, scale):
    """softmax(Q K^T scale) V in float64, head by head (GQA expanded)."""
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, 2), v.repeat_interleave(g, 2)
    out = torch.empty(q.shape, dtype=torch.float64, device=DEV)
    for h in range(q.shape[2]):
        s = torch.einsum("bqd,bkd->bqk", q[:, :, h].double(), k[:, :, h].double()) * scale
        out[:, :, h] = torch.einsum("bqk,bkd->bqd", torch.softmax(s, -1), v[:, :, h].double())
    return out


def main():
    for (b, sq, sk, hq, hkv, d) in SHAPES:
        scale = 1 / math.sqrt(d)
        spec = AttentionSpec("bf16", hq, hkv, d, d, False, scale)
        fields = dict(_jit._module().select_forward_schedule(d, False, False, 0, 0))
        kernels = {tau: _jit.get(spec, "cuda:0", "fwd",
                                 schedule=schedules.schedule(**dict(fields, rescale_threshold=tau)))
                   for tau in (0, 8)}
        ratios = {0: [], 8: []}
        for seed in range(16):
            gen = torch.Generator(device=DEV).manual_seed(seed)
            q, k, v = (torch.randn(b, s, h, d, device=DEV, generator=gen).bfloat16()
                       for s, h in ((sq, hq), (sk, hkv), (sk, hkv)))
            ref = reference_f64(q, k, v, scale)
            g = hq // hkv
            sdpa = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.repeat_interleave(g, 2).transpose(1, 2),
                v.repeat_interleave(g, 2).transpose(1, 2),
                attn_mask=torch.ones(sq, sk, dtype=torch.bool, device=DEV)).transpose(1, 2)
            sdpa_err = (sdpa.double() - ref).abs().max().item()
            for tau, kernel in kernels.items():
                out, lse = torch.empty_like(q), torch.empty(b, hq, sq, device=DEV)
                kernel.launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                              b, sq, sk, torch.cuda.current_stream().cuda_stream)
                torch.cuda.synchronize()
                ratios[tau].append((out.double() - ref).abs().max().item() / sdpa_err)
        for tau in (0, 8):
            r = sorted(ratios[tau])
            print(f"b{b} sq{sq} sk{sk} h{hq}x{hkv} d{d} tau={tau}: fa3/SDPA max-error ratio over 16 seeds: "
                  f"min {r[0]:.2f} median {r[8]:.2f} max {r[-1]:.2f} (> 2: {sum(x > 2 for x in r)})", flush=True)


if __name__ == "__main__":
    main()
