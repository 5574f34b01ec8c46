"""Quick backward smoke check on the GPU: fa3-run --device=cuda on a forward
+ backward function (causal, GQA 4:2, d128, ragged 300 x 300) against the
CPU pipeline's result on the same inputs. Prints the max differences; exits
non-zero if they exceed 2e-2 (bf16)."""
import os, subprocess, sys, tempfile
import numpy as np
run = os.environ.get("FA3_RUN", "fa3-run")
src = os.path.join(os.path.dirname(__file__), "smoke_fwd_bwd.mlir")
rng = np.random.default_rng(0)
d = tempfile.mkdtemp()
shapes = {"q": (1, 300, 4, 128), "k": (1, 300, 2, 128), "v": (1, 300, 2, 128), "do": (1, 300, 4, 128)}
for n, s in shapes.items():
    np.save(f"{d}/{n}.npy", rng.standard_normal(s).astype(np.float32))
outs = ["o", "lse", "dq", "dk", "dv"]
res = {}
for dev in ("cuda", "cpu"):
    cmd = [run, src, "--function=fwd_bwd", f"--device={dev}"] + [f"--input=@{d}/{n}.npy" for n in shapes] + \
          [f"--output=@{d}/{n}_{dev}.npy" for n in outs]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    print(dev, "rc", p.returncode, p.stderr[-2000:])
    if p.returncode:
        sys.exit(1)
    res[dev] = [np.load(f"{d}/{n}_{dev}.npy") for n in outs]
worst = 0
for n, a, b in zip(outs, res["cuda"], res["cpu"]):
    fin = np.isfinite(b)
    diff = np.abs(a[fin] - b[fin]).max() if fin.any() else 0
    print(f"{n}: max|cuda - cpu| {diff:.3e}  max|cpu| {np.abs(b[fin]).max():.3e}  nan {np.isnan(a).sum()}")
    worst = max(worst, diff)
sys.exit(0 if worst < 2e-2 else 2)
