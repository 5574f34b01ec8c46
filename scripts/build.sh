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
ninja -C "$FA3_BUILD_DIR" fa3-opt fa3-run fa3-cuda-info fa3-cache mlir-doc FA3CAPI FA3Plugin fa3-capi-test

# The Python extensions fa3._fa3 and (with jax installed) fa3._fa3_jax
# (python/src), in place next to the package, linked against the C API
# library just built. Skipped when up to date.
stale=0
for pair in _fa3.:fa3_module.cpp _fa3_jax.:fa3_jax_ffi.cpp; do
  ext="$(ls "$FA3_ROOT"/python/fa3/${pair%%:*}*so 2>/dev/null | head -1 || true)"
  if [ "${pair%%:*}" = _fa3_jax. ] && ! "$FA3_PYTHON" -c "import jax" 2>/dev/null; then
    continue
  fi
  if [ -z "$ext" ] || [ "$FA3_ROOT/python/src/${pair#*:}" -nt "$ext" ] || \
     [ "$FA3_ROOT/include/fa3-c/FA3.h" -nt "$ext" ]; then
    stale=1
  fi
done
if [ "$stale" = 1 ]; then
  (cd "$FA3_ROOT/python" && FA3_LIBRARY="$FA3_BUILD_DIR/lib/libFA3CAPI.so" \
     "$FA3_PYTHON" setup.py -q build_ext --inplace >/dev/null)
fi
