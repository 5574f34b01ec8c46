"""fa3-run on the CPU with .npy files: the inference tests' driver call."""

import subprocess

import numpy as np


def run(fa3_run, tmp_path, source, function, inputs, outputs, extra=()):
    """Writes `source` and the `inputs` arrays, runs `function` with
    `extra` flags, and returns (the process, the `outputs` arrays read
    back). The output files are poisoned (NaN) first: a run that writes
    nothing does not pass on stale data."""
    src = tmp_path / "f.mlir"
    src.write_text(source)
    cmd = [fa3_run, str(src), f"--function={function}", "--device=cpu", *extra]
    for i, x in enumerate(inputs):
        path = tmp_path / f"in{i}.npy"
        np.save(path, x)
        cmd.append(f"--input=@{path}")
    out_paths = [tmp_path / f"out{i}.npy" for i in range(outputs)]
    for path in out_paths:
        np.save(path, np.full((1,), np.nan, np.float32))
        cmd.append(f"--output=@{path}")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return proc, [np.load(p) for p in out_paths]
