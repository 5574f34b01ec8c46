#!/usr/bin/env bash
# Builds the GPU bundle: fa3-run, fa3-opt, fa3-cuda-info and libfa3.so (the C API)
# linked statically
# against LLVM/MLIR (they run on the GPU machine, which has no LLVM), packed
# xz-compressed into .bundle/ (git-ignored) together with what the GPU run
# needs. Carry .bundle with the device tool; scripts/gpu/run.sh unpacks it.
set -euo pipefail
source "$(dirname "$0")/env.sh"
BUNDLE_BUILD="${FA3_BUNDLE_BUILD_DIR:-$FA3_ROOT/build-bundle}"
if [ ! -f "$BUNDLE_BUILD/build.ninja" ]; then
  cmake -G Ninja -S "$FA3_ROOT" -B "$BUNDLE_BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE="$FA3_PYTHON" -DFA3_BUILD_STATIC_BUNDLE=ON >/dev/null
fi
ninja -C "$BUNDLE_BUILD" fa3-run-static fa3-opt-static fa3-cuda-info-static fa3-shared-static
mkdir -p "$FA3_ROOT/.bundle"
rm -f "$FA3_ROOT/.bundle/"*.xz
for tool in fa3-run fa3-opt fa3-cuda-info; do
  strip -o "$FA3_ROOT/.bundle/$tool" "$BUNDLE_BUILD/bundle/bin/$tool-static"
  xz -T2 -6 -f "$FA3_ROOT/.bundle/$tool"
done
strip -o "$FA3_ROOT/.bundle/libfa3.so" "$BUNDLE_BUILD/bundle/lib/libfa3.so"
xz -T2 -6 -f "$FA3_ROOT/.bundle/libfa3.so"
git -C "$FA3_ROOT" rev-parse HEAD > "$FA3_ROOT/.bundle/COMMIT"
ls -la "$FA3_ROOT/.bundle"
