#!/usr/bin/env bash
# Installs everything fa3 needs on a fresh Debian 12 machine (the project's
# `cpp-kernels` kind): LLVM/MLIR 22 and their tools from Debian, the build
# tools, and the Python packages of the tests. Idempotent; run as root.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
need_apt=0
for pkg in llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools ninja-build ccache cmake g++; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt=1
done
if [ "$need_apt" = 1 ]; then
  apt-get update -qq
  apt-get install -y -qq llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools \
    ninja-build ccache cmake g++ >/dev/null
fi

# The Python the build pins (see scripts/env.sh): pyenv's python3 where the
# machine has it, else Debian's.
source "$(dirname "$0")/env.sh"
"$FA3_PYTHON" -m pip install -q --disable-pip-version-check \
  numpy pytest pybind11 ml_dtypes setuptools wheel 2>&1 | grep -v "Running pip as the 'root'" || true
# torch and torch-mlir (from PyPI) for fa3-raise-attention's end-to-end test
# (test/Integration/CPU/test_torch_mlir_e2e.py: a live torch-mlir export).
# Pinned: torch-mlir's wheels are built against one torch.
"$FA3_PYTHON" -m pip install -q --disable-pip-version-check \
  torch==2.15.0 torch-mlir==20261001 2>&1 | grep -v "Running pip as the 'root'" || true
# transformers for fa3.integrations.transformers' tests (the CPU suite checks
# the registration and its errors; the GPU suite trains a model with it).
"$FA3_PYTHON" -m pip install -q --disable-pip-version-check \
  transformers==5.24.0 2>&1 | grep -v "Running pip as the 'root'" || true
# jax (CPU) for fa3.jax: scripts/build.sh builds fa3._fa3_jax, the XLA FFI
# handlers, against this jaxlib's FFI headers; the CPU suite runs them on
# jax's CPU platform (test/Integration/CPU/test_jax_cpu.py).
"$FA3_PYTHON" -m pip install -q --disable-pip-version-check \
  jax==0.10.2 jaxlib==0.10.2 2>&1 | grep -v "Running pip as the 'root'" || true
"$FA3_PYTHON" -c "import numpy, pytest, pybind11, ml_dtypes, torch, torch_mlir, transformers, jax" \
  || { echo "install.sh: Python packages missing for $FA3_PYTHON" >&2; exit 1; }
echo "install.sh: LLVM $(/usr/lib/llvm-22/bin/llvm-config --version), $("$FA3_PYTHON" --version)"
