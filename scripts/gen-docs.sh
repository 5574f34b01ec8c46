#!/usr/bin/env bash
# Regenerates the dialect and pass reference in docs/ from the ODS
# (`ninja mlir-doc`). The test suite checks that the committed copies are
# current (test/Docs/generated-docs-current.test).
set -euo pipefail
source "$(dirname "$0")/env.sh"
bash "$FA3_ROOT/scripts/build.sh" >/dev/null
ninja -C "$FA3_BUILD_DIR" mlir-doc >/dev/null
mkdir -p "$FA3_ROOT/docs/Dialects" "$FA3_ROOT/docs/Passes"
cp "$FA3_BUILD_DIR/docs/Dialects/"*.md "$FA3_ROOT/docs/Dialects/"
cp "$FA3_BUILD_DIR/docs/Passes/"*.md "$FA3_ROOT/docs/Passes/"
echo "gen-docs.sh: docs/Dialects and docs/Passes updated"
