"""torch → torch-mlir (live export, FX importer, linalg on tensors) →
fa3-raise-attention → fa3-run on the CPU, against torch's own output on the
same inputs (docs/examples/torch_mlir_to_fa3.py). torch and torch-mlir are
installed by scripts/install.sh; a missing one fails the test rather than
skipping it. Bound: both sides are f32; 1e-5 absolute on outputs of O(1)
(measured ~1e-7)."""

import importlib.util
import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


def _example():
    spec = importlib.util.spec_from_file_location("torch_mlir_to_fa3", REPO / "docs/examples/torch_mlir_to_fa3.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports torch and torch_mlir: fails loudly without them
    return module


def _modules(ex):
    import torch

    r = torch.randn
    return {
        "sdpa": (ex.SDPA(), (r(2, 4, 17, 32), r(2, 4, 29, 32), r(2, 4, 29, 32))),
        "sdpa_causal_gqa": (ex.SDPA(is_causal=True, enable_gqa=True), (r(1, 8, 33, 16), r(1, 2, 33, 16),
                                                                         r(1, 2, 33, 16))),
        "handwritten": (ex.HandWritten(scale=0.2), (r(3, 2, 5, 8), r(3, 2, 7, 8), r(3, 2, 7, 8))),
        "gpt_block": (ex.GPTBlock(), (r(2, 19, 64),)),
    }


@pytest.mark.parametrize("name", ["sdpa", "sdpa_causal_gqa", "handwritten", "gpt_block"])
def test_torch_module_through_fa3(name, fa3_run, fa3_opt):
    ex = _example()
    module, inputs = _modules(ex)[name]
    ours, expected, ir = ex.run(module, *inputs, name=name)
    assert ir.count("fa3.attention") == 1, ir[:2000]
    # Both matmuls of the attention are gone; the GPT block keeps its output
    # projection's.
    assert ir.count("linalg.batch_matmul") == (1 if name == "gpt_block" else 0)
    assert ours.shape == expected.shape
    assert not np.isnan(ours).any()
    assert np.abs(ours - expected).max() <= 1e-5, np.abs(ours - expected).max()
