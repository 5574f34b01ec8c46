"""fa3-raise-attention keeps what torch-mlir's module computes: each
positive fixture of test/Conversion/RaiseAttention/Inputs (real torch-mlir
output) runs on the CPU as it is (linalg) and after the raise (fa3.attention
through fa3-cpu-pipeline), on fresh random inputs, against a float64 NumPy
reference. Both are f32 end to end; they differ only in summation order and
in where the scale is applied (torch-mlir scales Q and Kᵀ by D^-1/4 each,
fa3 scales S once), so the bound is f32 rounding over D = 16 and Sk = 23
terms: 1e-5 absolute on O, whose entries are O(1). bf16 and f16 exports
round O once (2^-8 and 2^-11 relative): raised with `narrow=false` (the
export's f32 arithmetic) the bound is 2^-7 and 2^-10 there. Raised as
they are by default, in the 16-bit type, fa3 also rounds P to that type for
the P·V product (as on Hopper and in FlashAttention): with unit roundoff u
(2^-9 bf16, 2^-11 f16) each of O's sums moves by at most u·max|V| from P
and each side rounds O (u·|O|), so 2u·(max|V| + |O|) bounds the
difference (measured: 2^-7 bf16 and 2^-9 f16 over 25 seeds). The
raised module with its attention outlined (fa3-outline-attention: the form
the Hopper path compiles, test/Integration/GPU/test_raised_attention_gpu.py)
computes the same."""

import pathlib
import subprocess

import ml_dtypes
import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
INPUTS = REPO / "test/Conversion/RaiseAttention/Inputs"

# fixture: (scale, causal, Sq, Sk, kv heads, dtype)
CASES = {
    "sdpa": (0.25, False, 17, 23, 4, "f32"),
    "sdpa_scale": (0.3, False, 17, 23, 4, "f32"),
    "sdpa_causal": (0.25, True, 23, 23, 4, "f32"),
    "sdpa_causal_sq_gt_sk": (0.25, True, 23, 17, 4, "f32"),
    "sdpa_gqa": (0.25, False, 17, 23, 2, "f32"),
    "sdpa_bf16": (0.25, False, 17, 23, 4, "bf16"),
    "sdpa_f16": (0.25, True, 23, 23, 4, "f16"),
    "handwritten": (0.25, False, 17, 23, 4, "f32"),
}


def _reference(q, k, v, scale, causal):
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:  # torch's is_causal: key <= query (top-left)
        sq, sk = s.shape[-2:]
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", p, v.astype(np.float64))


def _run(fa3_run, mlir, function, inputs, tmp_path, tag):
    args = []
    for i, x in enumerate(inputs):
        path = tmp_path / f"{tag}_in{i}.npy"
        np.save(path, x)
        args.append(f"--input=@{path}")
    out = tmp_path / f"{tag}_out.npy"
    np.save(out, np.full((1,), np.nan, np.float32))
    proc = subprocess.run([fa3_run, str(mlir), f"--function={function}", "--device=cpu", *args,
                           f"--output=@{out}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return np.load(out)


@pytest.mark.parametrize("name,narrow", [(n, True) for n in sorted(CASES)]
                         + [(n, False) for n in sorted(CASES) if CASES[n][5] != "f32"])
def test_raised_module_computes_the_original(name, narrow, fa3_run, fa3_opt, tmp_path):
    scale, causal, sq, sk, hkv, dtype = CASES[name]
    source = INPUTS / f"{name}.mlir"
    raised = tmp_path / "raised.mlir"
    proc = subprocess.run([fa3_opt, str(source), f"--fa3-raise-attention=narrow={str(narrow).lower()}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "fa3.attention" in proc.stdout and "remark" not in proc.stderr, proc.stderr
    raised.write_text(proc.stdout)

    rng = np.random.default_rng()
    q = rng.standard_normal((2, 4, sq, 16)).astype(np.float32)
    k = rng.standard_normal((2, hkv, sk, 16)).astype(np.float32)
    v = rng.standard_normal((2, hkv, sk, 16)).astype(np.float32)
    # bf16: fa3-run reads float32 values rounded to bf16; torch-mlir computes
    # bf16 SDPA in f32 and rounds O once, so the raised f32 attention of the
    # upcast inputs may differ from the original by that rounding only.
    bound = 1e-5
    if dtype == "bf16":
        q, k, v = (x.astype(ml_dtypes.bfloat16).astype(np.float32) for x in (q, k, v))
        bound = 2.0 ** -7
    elif dtype == "f16":  # fa3-run reads f16 as float16; O rounds to f16 once (2^-11)
        q, k, v = (x.astype(np.float16) for x in (q, k, v))
        bound = 2.0 ** -10
    # The 16-bit bounds above are one ulp of O below 2; |O| can reach a few
    # (a softmax average of standard normals), where the ulp doubles.
    if dtype != "f32":
        bound *= max(1.0, float(2.0 ** np.floor(np.log2(np.abs(_reference(q, k, v, scale, causal)).max()))))
    outlined = tmp_path / "outlined.mlir"
    proc = subprocess.run([fa3_opt, str(raised), "--fa3-outline-attention"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"call @{name}_attention_0(" in proc.stdout
    outlined.write_text(proc.stdout)
    original = _run(fa3_run, source, name, (q, k, v), tmp_path, "orig")
    ours = _run(fa3_run, raised, name, (q, k, v), tmp_path, "raised")
    ours_outlined = _run(fa3_run, outlined, name, (q, k, v), tmp_path, "outlined").astype(np.float32)
    assert np.abs(ours_outlined - ours.astype(np.float32)).max() <= bound
    original, ours = original.astype(np.float32), ours.astype(np.float32)
    ref = _reference(q, k, v, scale, causal)
    export_bound = bound
    if narrow and dtype != "f32":  # P rounded to the 16-bit type too (see above)
        u = 2.0 ** -9 if dtype == "bf16" else 2.0 ** -11
        bound = 2 * u * (np.abs(v.astype(np.float32)).max() + np.abs(ref).max())
        assert f"x{dtype}>) -> (tensor<" in raised.read_text()  # the attention runs in that type
    assert original.shape == ours.shape == ref.shape
    assert not np.isnan(ours).any()
    assert np.abs(ours - original).max() <= bound, np.abs(ours - original).max()
    assert np.abs(ours - ref).max() <= bound, np.abs(ours - ref).max()
    assert np.abs(original - ref).max() <= export_bound  # the fixture is what we think it is
