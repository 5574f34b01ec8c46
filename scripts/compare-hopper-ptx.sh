#!/usr/bin/env bash
# Compares two dumps of scripts/dump-hopper-ptx.sh: each file is identical,
# or differs in its PTX but ptxas assembles both to the same cubin (e.g. two
# independent instructions in another order), or differs in the machine
# code. Exits 1 if any file does (or is missing), so a refactor that exits
# 0 runs exactly the same kernels and needs no GPU run.
#   bash scripts/compare-hopper-ptx.sh BEFORE_DIR AFTER_DIR
set -uo pipefail
before=${1:?usage: compare-hopper-ptx.sh BEFORE_DIR AFTER_DIR}
after=${2:?usage: compare-hopper-ptx.sh BEFORE_DIR AFTER_DIR}
ptxas=${FA3_PTXAS:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
same=0 assembled=0 differ=0
for f in "$before"/*.ptx; do
  name=$(basename "$f"); g=$after/$name
  if [ ! -f "$g" ]; then echo "missing: $name"; differ=$((differ + 1)); continue; fi
  if cmp -s "$f" "$g"; then same=$((same + 1)); continue; fi
  if "$ptxas" -arch=sm_90a "$f" -o "$tmp/a.cubin" 2>/dev/null &&
     "$ptxas" -arch=sm_90a "$g" -o "$tmp/b.cubin" 2>/dev/null &&
     cmp -s "$tmp/a.cubin" "$tmp/b.cubin"; then
    echo "same cubin: $name"; assembled=$((assembled + 1))
  else
    echo "DIFFERS: $name"; differ=$((differ + 1))
  fi
done
echo "compare-hopper-ptx.sh: $same identical, $assembled with identical cubins, $differ differ"
[ "$differ" -eq 0 ]
