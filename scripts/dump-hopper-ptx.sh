#!/usr/bin/env bash
# Dumps the PTX of every function of test/Pipeline/Hopper's inputs (the
# parts of split-file inputs too) and of any extra .mlir files given after
# the output directory, one file per function, with fa3-run --emit=ptx.
# For refactors of the Hopper code generation: dump before and after, then
# `python3 scripts/ptx_matrix.py compare BEFORE AFTER` (identical, renamed
# registers, or assembled by ptxas to the same cubin).
#   bash scripts/dump-hopper-ptx.sh OUT_DIR [scripts/ptx-extra-backward.mlir ...]
set -uo pipefail
source "$(dirname "$0")/env.sh"
out=${1:?usage: dump-hopper-ptx.sh OUT_DIR [EXTRA.mlir ...]}; shift
mkdir -p "$out"; tmp=$(mktemp -d)
cd "$FA3_ROOT"
for f in test/Pipeline/Hopper/*.mlir test/Pipeline/Hopper/Inputs/*.mlir "$@"; do
  parts=$f
  if grep -q "split-file" "$f"; then
    d=$tmp/$(basename "$f" .mlir); mkdir -p "$d"
    /usr/lib/llvm-22/bin/split-file "$f" "$d"; parts=$(ls "$d"/*)
  fi
  for p in $parts; do
    for fn in $(grep -o "^func.func @[A-Za-z0-9_]*" "$p" | sed 's/func.func @//'); do
      key=$(echo "$p" | sed "s#$tmp/##; s#/#_#g")__$fn
      "$FA3_BUILD_DIR/bin/fa3-run" "$p" --function="$fn" --emit=ptx > "$out/$key.ptx" 2>&1
    done
  done
done
rm -rf "$tmp"; echo "dump-hopper-ptx.sh: $(ls "$out" | wc -l) files in $out"
