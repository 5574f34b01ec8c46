#!/usr/bin/env bash
# README command 1: install the dependencies, build fa3, run the demo.
set -euo pipefail
here="$(dirname "$0")"
bash "$here/install.sh"
bash "$here/build.sh"
source "$here/env.sh"
"$FA3_PYTHON" "$here/demo.py"
