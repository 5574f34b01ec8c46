#!/usr/bin/env bash
# Configures (once) and builds fa3 with ninja and ccache into $FA3_BUILD_DIR.
set -euo pipefail
source "$(dirname "$0")/env.sh"

if [ ! -f "$FA3_BUILD_DIR/build.ninja" ]; then
  cmake -G Ninja -S "$FA3_ROOT" -B "$FA3_BUILD_DIR" \
    -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE="$FA3_PYTHON" \
    -DLLVM_ENABLE_ASSERTIONS=OFF >/dev/null
fi
ninja -C "$FA3_BUILD_DIR" fa3-opt fa3-run fa3-cuda-info fa3-cache mlir-doc
