"""The Python package's CPU tests: `import fa3` from python/ (the extension
fa3._fa3 is built in place by scripts/build.sh)."""

import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
