"""A torch module through torch-mlir and fa3: export it to linalg on tensors
with torch-mlir's FX importer, raise its attention into fa3.attention
(`fa3-raise-attention`), compile and run the whole module with fa3 on the CPU
(`fa3-run --device=cpu`: fa3-cpu-pipeline and MLIR's ExecutionEngine), and
compare with torch's own output.

  pip install torch torch-mlir
  python docs/examples/torch_mlir_to_fa3.py        # a GPT block, SDPA causal

`run(module, *inputs)` returns (fa3's output, torch's output, the raised IR).
"""
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch_mlir import fx

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("FA3_BUILD_DIR", ROOT / "build")) / "bin"


def run(module, *inputs, name="forward"):
    module = module.eval()
    with torch.no_grad():
        expected = module(*inputs)
    exported = fx.export_and_import(module, *inputs, output_type="linalg-on-tensors", func_name=name)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "torch.mlir").write_text(str(exported))
        raised = subprocess.run([str(BIN / "fa3-opt"), str(tmp / "torch.mlir"), "--fa3-raise-attention",
                                 "--canonicalize", "--cse"], capture_output=True, text=True, check=True)
        if raised.stderr:
            print(raised.stderr, file=sys.stderr)  # remarks: why an attention was not raised
        (tmp / "fa3.mlir").write_text(raised.stdout)
        args = []
        for i, x in enumerate(inputs):
            np.save(tmp / f"in{i}.npy", x.numpy())
            args.append(f"--input=@{tmp / f'in{i}.npy'}")
        np.save(tmp / "out.npy", np.full((1,), np.nan, np.float32))
        subprocess.run([str(BIN / "fa3-run"), str(tmp / "fa3.mlir"), f"--function={name}", "--device=cpu", *args,
                        f"--output=@{tmp / 'out.npy'}"], capture_output=True, text=True, check=True)
        return np.load(tmp / "out.npy"), expected.numpy(), raised.stdout


class SDPA(nn.Module):
    """F.scaled_dot_product_attention(q, k, v, **kwargs)."""

    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **self.kwargs)


class HandWritten(nn.Module):
    """softmax(q @ k^T * scale) @ v, written out."""

    def __init__(self, scale=0.25):
        super().__init__()
        self.scale = scale

    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) * self.scale, dim=-1) @ v


class GPTBlock(nn.Module):
    """Causal self-attention of a GPT block: QKV projection, SDPA, output
    projection."""

    def __init__(self, d_model=64, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


def main():
    torch.manual_seed(0)
    ours, expected, ir = run(GPTBlock(), torch.randn(2, 19, 64), name="gpt_block")
    raised = ir.count("fa3.attention")
    err = np.abs(ours - expected).max()
    print(f"GPT block: {raised} fa3.attention raised, max |fa3 - torch| = {err:.3g} "
          f"(max |torch| = {np.abs(expected).max():.3g})")
    return 0 if raised == 1 and err <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
