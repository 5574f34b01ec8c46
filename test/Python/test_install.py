"""The documented install command works offline: `pip install
--no-build-isolation ./python` with FA3_LIBRARY pointing at the C API
library builds fa3._fa3 and installs a package that runs attention."""

import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_pip_install_into_a_target_dir(tmp_path):
    library = pathlib.Path(os.environ.get("FA3_BUILD_DIR", REPO / "build")) / "lib" / "libFA3CAPI.so"
    assert library.exists(), f"{library} not built (scripts/build.sh builds it)"
    target = tmp_path / "site"
    env = dict(os.environ, FA3_LIBRARY=str(library), PIP_NO_INDEX="1")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                           "--target", str(target), str(REPO / "python")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list((target / "fa3").glob("_fa3*.so")), sorted(p.name for p in (target / "fa3").iterdir())
    script = ("import numpy as np, fa3; q = np.ones((1, 4, 2, 32), np.float32); "
              "out = fa3.attention(q, q, q, causal=True); print(fa3.__file__, out.shape, float(out.sum()))")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(target)), cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    path, shape = run.stdout.split()[0], run.stdout.split("(")[1].split(")")[0]
    assert path.startswith(str(target)) and shape == "1, 4, 2, 32"
    # All-ones inputs: every output element is exactly 1.
    assert float(run.stdout.split()[-1]) == 1 * 4 * 2 * 32
