"""The README demo: compile docs/examples/attention.mlir, run it with fa3-run
on fresh random inputs and compare with the float64 reference; then the
forward + backward of docs/examples/train_step.mlir against the float64
gradient."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np

root = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root / "python"))
from fa3 import reference  # noqa: E402

build = pathlib.Path(os.environ.get("FA3_BUILD_DIR", root / "build"))
fa3_opt, fa3_run = build / "bin" / "fa3-opt", build / "bin" / "fa3-run"
example = root / "docs" / "examples" / "attention.mlir"
train_step = root / "docs" / "examples" / "train_step.mlir"


def run(cmd, **kw):
    print("$", " ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=True, text=True, capture_output=True, **kw)


def run_example(device, runs):
    """fa3-run on the example with q, k, v; returns (O, LSE)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for name, x in (("q", q), ("k", k), ("v", v)):
            np.save(tmp / f"{name}.npy", x)
        out = run([fa3_run, example, "--function=attention", f"--device={device}",
                   f"--input=@{tmp/'q.npy'}", f"--input=@{tmp/'k.npy'}", f"--input=@{tmp/'v.npy'}",
                   f"--output=@{tmp/'o.npy'}", f"--output=@{tmp/'lse.npy'}", f"--benchmark={runs}"]).stdout
        print("   ", out.strip().replace("\n", "\n    "))
        return np.load(tmp / "o.npy"), np.load(tmp / "lse.npy")


print("== 1. The tile level: fa3-opt --fa3-select-schedule --fa3-tile --fa3-fuse-softmax")
tiled = run([fa3_opt, example, "--fa3-select-schedule", "--fa3-tile", "--fa3-fuse-softmax"]).stdout
for op in ("fa3.load_tile", "fa3.qk", "fa3.mask", "fa3.online_softmax", "fa3.pv", "fa3.finalize", "fa3.store_tile"):
    line = next(l.strip() for l in tiled.splitlines() if op + " " in l)
    print("   ", line[:150])

print("\n== 2. The CPU pipeline: fa3-opt --fa3-cpu-pipeline (LLVM dialect)")
llvm = run([fa3_opt, example, "--fa3-cpu-pipeline"]).stdout
print(f"    {len(llvm.splitlines())} lines of LLVM dialect, "
      f"{sum('llvm.func' in l for l in llvm.splitlines())} llvm.func")

print("\n== 3. Run on the CPU: fa3-run --device=cpu, B=2, Sq=Sk=300")
rng = np.random.default_rng()
b, s = 2, 300
q = rng.standard_normal((b, s, 8, 64)).astype(np.float16)
k = rng.standard_normal((b, s, 2, 64)).astype(np.float16)
v = rng.standard_normal((b, s, 2, 64)).astype(np.float16)
o, lse = run_example("cpu", runs=3)
ref_o, ref_lse = reference.attention(q, k, v, causal=True)
o_err = np.abs(o.astype(np.float64) - ref_o).max()
lse_err = np.abs(lse - ref_lse).max()
print(f"    max |O - reference| = {o_err:.2e} (f16 output, u = 4.9e-4)")
print(f"    max |LSE - reference| = {lse_err:.2e}")
ok = o_err < 5e-3 and lse_err < 1e-4
print("\n== 4. The Hopper kernel: fa3-run --emit=ptx (sm_90a; no GPU needed)")
ptx = run([fa3_run, example, "--function=attention", "--emit=ptx"]).stdout
for what in ("cp.async.bulk.tensor", "mbarrier.try_wait", "wgmma.mma_async", "ex2.approx"):
    print(f"    {what}: {ptx.count(what)}")
ptxas = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.path.exists("/usr/local/cuda/bin/ptxas") else None)
if ptxas:
    with tempfile.TemporaryDirectory() as tmp:
        (pathlib.Path(tmp) / "k.ptx").write_text(ptx)
        info = run([ptxas, "-arch=sm_90a", "-v", f"{tmp}/k.ptx", "-o", f"{tmp}/k.cubin"]).stderr
        print("    ptxas -arch=sm_90a:", next((l.strip() for l in info.splitlines() if "Used" in l), "assembled"))
else:
    print("    (no ptxas here: PTX not assembled)")



def run_train_step(device):
    """fa3-run on train_step.mlir (bf16 inputs given as float32 .npy);
    returns its max gradient error against the float64 reference."""
    rng = np.random.default_rng()
    b, sq, sk = 1, 200, 250
    ins = {n: rng.standard_normal(sh).astype(ml_dtypes.bfloat16).astype(np.float32)
           for n, sh in (("q", (b, sq, 8, 64)), ("k", (b, sk, 2, 64)), ("v", (b, sk, 2, 64)), ("do", (b, sq, 8, 64)))}
    outs = ("o", "lse", "dq", "dk", "dv")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for n, x in ins.items():
            np.save(tmp / f"{n}.npy", x)
        run([fa3_run, train_step, "--function=train_step", f"--device={device}"]
            + [f"--input=@{tmp / n}.npy" for n in ins] + [f"--output=@{tmp / n}.npy" for n in outs])
        got = {n: np.load(tmp / f"{n}.npy").astype(np.float64) for n in outs}
    ref = dict(zip(("dq", "dk", "dv"), reference.attention_grad(ins["q"], ins["k"], ins["v"], ins["do"], causal=True)))
    errs = {n: np.abs(got[n] - ref[n]).max() for n in ref}
    print("    " + ", ".join(f"max |{n} - reference| = {e:.2e}" for n, e in errs.items()) + " (bf16, u = 3.9e-3)")
    return max(errs.values())


print("\n== 5. Forward + backward: fa3-run on train_step.mlir (CPU), Sq=200, Sk=250")
ok = ok and run_train_step("cpu") < 0.1

print("\n== 6. From Python: import fa3; fa3.attention(q, k, v, causal=True) on numpy arrays")
import fa3  # noqa: E402 (python/ is on sys.path; scripts/build.sh built fa3._fa3)

py_o = fa3.attention(q, k, v, causal=True)
py_err = np.abs(py_o.astype(np.float64) - ref_o).max()
print(f"    max |O - reference| = {py_err:.2e}; first compile {fa3.cache_info()['compile_ms'][0]:.0f} ms")
ok = ok and py_err < 5e-3

print("\n== 7. On the GPU: fa3-run --device=cuda")
if subprocess.run([str(build / "bin" / "fa3-cuda-info")], capture_output=True).returncode != 0:
    print("    no CUDA driver/GPU on this machine: skipped (docs/GPU.md runs it on the H200)")
else:
    gpu_o, _ = run_example("cuda", runs=10)
    gpu_err = np.abs(gpu_o.astype(np.float64) - ref_o).max()
    print(f"    max |O - reference| on the GPU = {gpu_err:.2e}")
    ok = ok and gpu_err < 5e-3 and run_train_step("cuda") < 0.1
print("demo:", "OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
