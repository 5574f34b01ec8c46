#!/usr/bin/env bash
# README command 2: builds what is missing, then runs the whole test suite
# this machine can run: lit (FileCheck tests on IR and, with ptxas, PTX) and
# pytest (CPU numerics against a float64 reference). GPU tests run only where
# a CUDA device is present; lit reports them as UNSUPPORTED otherwise.
set -uo pipefail
source "$(dirname "$0")/env.sh"

bash "$FA3_ROOT/scripts/build.sh" || { echo "test.sh: build failed"; exit 1; }

log="$FA3_BUILD_DIR/test-logs"
mkdir -p "$log"
status=0

echo "== lit: $FA3_BUILD_DIR/test"
# Debian's lit (llvm-22-tools), the one that matches its FileCheck.
/usr/lib/llvm-22/bin/lit -v "$FA3_BUILD_DIR/test" 2>&1 | tee "$log/lit.txt"
lit_rc=${PIPESTATUS[0]}

echo "== pytest: test/Integration/CPU test/Python"
"$FA3_PYTHON" -m pytest -q -p no:cacheprovider "$FA3_ROOT/test/Integration/CPU" "$FA3_ROOT/test/Python" \
  2>&1 | tee "$log/pytest.txt"
py_rc=${PIPESTATUS[0]}

# One closing line over both runners.
lit_count() {  # the number on lit's summary line "  <label>: N (xx.xx%)"
  sed -nE "s/^ *($1) *: *([0-9]+).*/\2/p" "$log/lit.txt" | awk '{s+=$1} END {print s+0}'
}
lit_passed=$(lit_count 'Passed')
lit_failed=$(lit_count 'Failed|Unresolved|Timed Out|Unexpectedly Passed')
lit_unsupported=$(lit_count 'Unsupported')
py_passed=$(grep -Eo '[0-9]+ passed' "$log/pytest.txt" | tail -1 | grep -Eo '[0-9]+' || echo 0)
py_failed=$(grep -Eo '[0-9]+ (failed|error|errors)' "$log/pytest.txt" | grep -Eo '[0-9]+' | awk '{s+=$1} END {print s+0}')
# A runner that failed without reporting a failed test still fails.
[ "$lit_rc" != 0 ] && [ "${lit_failed:-0}" = 0 ] && lit_failed=1
[ "$py_rc" != 0 ] && [ "${py_failed:-0}" = 0 ] && py_failed=1
passed=$((lit_passed + py_passed))
failed=$((${lit_failed:-0} + ${py_failed:-0}))
if [ "$passed" = 0 ]; then
  echo "test.sh: no test ran"
  status=1
fi
echo "lit: $lit_passed passed, ${lit_failed:-0} failed, $lit_unsupported unsupported (GPU tests without a GPU)"
echo "pytest: $py_passed passed, ${py_failed:-0} failed"
echo "fa3: $passed passed, $failed failed"
[ "$failed" = 0 ] || status=1
exit $status
