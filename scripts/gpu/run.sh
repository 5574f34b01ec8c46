#!/usr/bin/env bash
# One GPU-machine run (see docs/GPU.md). The GPU machine has no LLVM: build
# the static bundle here first (scripts/build-bundle.sh), carry .bundle with
# the device tool, then run `bash scripts/gpu/run.sh [tests|bench|sass|all]`
# there (`none` only unpacks the bundle and builds the Python extension;
# `tests FILE...` runs only those test files, `bench ARGS...` the benchmark
# with those arguments (e.g. --varlen, --decode), `bench-dropout ARGS...`
# bench/bench_dropout.py (dropout's cost), `sustained ARGS...`
# bench/bench_sustained.py (default: #11's forward table, d64/d128/d256 at
# 512-16k causal or not and ViT S = 197, in alternating 1 s windows with
# cuDNN and SDPA FLASH; ~7 minutes), `bench-cast` the fa3-cast-fp8
# chain benchmark, `ab-bench OTHER_LIBFA3 [ARGS]` the benchmark
# with this bundle and another build's libfa3.so in alternating rounds,
# `ab-sustained OTHER_LIBFA3 [ARGS]` the same with bench_sustained.py, whose
# in-process cuDNN column keeps each round's clock in view). Logs go to
# $OUT (or ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/../.."
what="${1:-all}"
shift || true
tests=("$@")
# `bench ARGS...` passes ARGS to bench_attention.py (e.g. --varlen).
bench_args=()
[ "$what" = bench ] && bench_args=("$@")
[ "$what" = bench-dropout ] && bench_args=("$@")
[ "$what" = sustained ] && bench_args=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(test/Integration/GPU)
out="${OUT:-$PWD/gpu-out}"
mkdir -p "$out"
bin=/tmp/fa3-bundle/bin
mkdir -p "$bin"
for f in .bundle/*.xz; do
  xz -dc "$f" > "$bin/$(basename "$f" .xz)"
  chmod +x "$bin/$(basename "$f" .xz)"
done
export FA3_RUN="$bin/fa3-run" FA3_LIB="$bin/libfa3.so" PATH="$bin:/usr/local/cuda/bin:$PATH"
export FA3_CACHE_DIR="${FA3_CACHE_DIR:-/tmp/fa3-cache}"
PY=/opt/torch/.venv/bin/python
[ -x "$PY" ] || PY=python3
export PYTHONUNBUFFERED=1

echo "== bundle $(cat .bundle/COMMIT 2>/dev/null), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"

# fa3._fa3 against the bundle's libfa3.so with this machine's Python and
# pybind11 (seconds): setuptools when the venv has it, else one g++ call.
rm -f python/fa3/_fa3*.so
if ! (cd python && FA3_LIBRARY="$bin/libfa3.so" "$PY" setup.py -q build_ext --inplace >"$out/python-build.txt" 2>&1); then
  suffix=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
  g++ -O2 -shared -fPIC -std=c++17 -fvisibility=hidden $("$PY" -m pybind11 --includes) -Iinclude \
    python/src/fa3_module.cpp -o "python/fa3/_fa3$suffix" -L"$bin" -l:libfa3.so -Wl,-rpath,"$bin" \
    >>"$out/python-build.txt" 2>&1 || { echo "building fa3._fa3 failed:"; tail -20 "$out/python-build.txt"; }
fi
ls python/fa3/_fa3*.so >/dev/null 2>&1 && echo "fa3._fa3 built: $(ls python/fa3/_fa3*.so)"
"$bin/fa3-cuda-info" | tee "$out/cuda-info.txt"
status=0

# The C API from C (test/CAPI/fa3-capi-test.c) against the bundle's libfa3.so.
if gcc -O1 -Iinclude test/CAPI/fa3-capi-test.c -o /tmp/fa3-capi-test -L"$bin" -l:libfa3.so \
     -Wl,-rpath,"$bin" -lm -ldl >"$out/capi-test.txt" 2>&1; then
  for mode in "" --gpu; do
    /tmp/fa3-capi-test $mode >>"$out/capi-test.txt" 2>&1 || { echo "fa3-capi-test $mode FAILED"; status=1; }
  done
  echo "fa3-capi-test: $(grep -c ': ok$' "$out/capi-test.txt") ok, $(grep -c 'FAIL' "$out/capi-test.txt") FAIL"
else
  echo "building fa3-capi-test failed"; status=1
fi

if [ "$what" = sass ] || [ "$what" = all ]; then
  echo "== SASS of the kernels (ptxas + cuobjdump)"
  for f in d64_full d128_causal d256_full; do
    "$FA3_RUN" test/Pipeline/Hopper/Inputs/kernels.mlir --function=$f --emit=ptx > "/tmp/$f.ptx"
    ptxas -arch=sm_90a -v "/tmp/$f.ptx" -o "/tmp/$f.cubin" 2>&1 | grep -E "C75|Used" | sed "s/^/$f: /"
    cuobjdump -sass "/tmp/$f.cubin" > "/tmp/$f.sass"
    echo "$f: HGMMA $(grep -c HGMMA "/tmp/$f.sass"), UTMALDG $(grep -c UTMALDG "/tmp/$f.sass"), WARPGROUP.ARRIVE $(grep -c 'WARPGROUP.ARRIVE' "/tmp/$f.sass"), WARPGROUP.DEPBAR $(grep -c 'WARPGROUP.DEPBAR' "/tmp/$f.sass")"
  done 2>&1 | tee "$out/sass.txt"
  cp /tmp/d128_causal.sass "$out/d128_causal.sass" 2>/dev/null || true
fi

if [ "$what" = tests ] || [ "$what" = all ]; then
  echo "== GPU tests"
  # GPU_TEST_JOBS=N runs the files in N pytest-xdist workers (the suite's
  # time is mostly kernel compilation, which the 16 host cores share out).
  # Each worker's torch keeps up to ~10 GiB of GPU memory cached, so 4 fit
  # an 80 GB H100 (8 ran out of memory in test_attention_gpu.py). The GPU
  # machine has no package index: xdist comes from wheels carried in
  # $FA3_WHEEL_DIR (pip download pytest-xdist execnet --no-deps).
  jobs=()
  if [ "${GPU_TEST_JOBS:-1}" -gt 1 ]; then
    "$PY" -c "import xdist" 2>/dev/null || [ -z "${FA3_WHEEL_DIR:-}" ] ||
      "$PY" -m pip install -q --no-index --find-links "$FA3_WHEEL_DIR" pytest-xdist >>"$out/python-build.txt" 2>&1
    if "$PY" -c "import xdist" 2>/dev/null; then jobs=(-n "$GPU_TEST_JOBS")
    else echo "pytest-xdist missing: running the tests in one process"; fi
  fi
  "$PY" -m pytest -q -rA -p no:cacheprovider "${jobs[@]}" "${tests[@]}" 2>&1 | tee "$out/gpu-tests.txt" | grep -vE "^PASSED" | tail -40
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
  echo "== benchmark"
  "$PY" bench/bench_attention.py --out "$out" "${bench_args[@]}" 2>&1 | tee "$out/bench.txt" | tail -40
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "$what" = bench-dropout ]; then
  echo "== dropout benchmark"
  "$PY" bench/bench_dropout.py --out "$out" "${bench_args[@]}" 2>&1 | tee "$out/bench-dropout.txt" | tail -40
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "$what" = sustained ]; then
  echo "== sustained forward (bench_sustained.py)"
  if [ ${#bench_args[@]} -eq 0 ]; then
    rows=""
    for s in 4096 8192 16384 512 1024 2048; do for d in 64 128 256; do rows="$rows,$d:$s,$d:$s:c"; done; done
    bench_args=(--rows "${rows#,},vit:197" --seconds 1 --rounds 2 --flash)
  fi
  "$PY" bench/bench_sustained.py --out "$out" "${bench_args[@]}" 2>&1 | tee "$out/sustained-log.txt" | grep "^|"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "$what" = bench-dispatch ]; then
  echo "== dispatch benchmark"
  "$PY" bench/bench_dispatch.py --out "$out" 2>&1 | tee "$out/bench-dispatch.txt" | tail -12
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "$what" = ab-bench ]; then
  # ab-bench OTHER_LIBFA3.so[.xz] [bench_attention.py args]: the benchmark
  # with this bundle's libfa3.so and with OTHER swapped in (the same
  # fa3._fa3, the same machine, each side with its own kernel cache), in
  # AB_ROUNDS (default 2) rounds that alternate the sides, then a table of
  # both fa3 columns per round and the change of the means
  # (scripts/gpu/ab_table.py). OTHER must have this bundle's C API.
  other="${tests[0]:?ab-bench needs the other libfa3.so(.xz)}"
  bench_args=("${tests[@]:1}")
  [ ${#bench_args[@]} -gt 0 ] || bench_args=(--fwd-only --variants '' --no-vit)
  rounds="${AB_ROUNDS:-2}"
  echo "== A/B benchmark: this bundle and $other, $rounds alternating rounds"
  cp "$bin/libfa3.so" /tmp/fa3-ab-this.so
  case "$other" in
    *.xz) xz -dc "$other" > /tmp/fa3-ab-other.so ;;
    *) cp "$other" /tmp/fa3-ab-other.so ;;
  esac
  # Each run's bench.json under /tmp (few files come back through $OUT):
  # $OUT gets ab.md and ab-runs.txt, every run's rows in turn.
  ab=/tmp/fa3-ab
  rm -rf "$ab" && mkdir -p "$ab"
  for round in $(seq 1 "$rounds"); do
    for side in this other; do
      cp "/tmp/fa3-ab-$side.so" "$bin/libfa3.so"
      echo "== $side, round $round" >> "$out/ab-runs.txt"
      FA3_CACHE_DIR="/tmp/fa3-cache-ab-$side" "$PY" bench/bench_attention.py "${bench_args[@]}" \
        --out "$ab/$side-$round" >> "$out/ab-runs.txt" 2>&1 || status=1
    done
  done
  cp /tmp/fa3-ab-this.so "$bin/libfa3.so"
  "$PY" scripts/gpu/ab_table.py "$ab" "$rounds" | tee "$out/ab.md"
fi
if [ "$what" = ab-sustained ]; then
  # ab-sustained OTHER_LIBFA3.so[.xz] [bench_sustained.py args]: one
  # bench_sustained.py process a side and round (AB_ROUNDS, default 2),
  # this bundle's libfa3.so first, each side with its own kernel cache;
  # every round's table rows, prefixed by side and round, and the logs in
  # $OUT/ab-sustained.txt.
  other="${tests[0]:?ab-sustained needs the other libfa3.so(.xz)}"
  bench_args=("${tests[@]:1}")
  [ ${#bench_args[@]} -gt 0 ] || bench_args=(--fp8 --rows 128:8192,128:8192:c --seconds 1 --rounds 1)
  rounds="${AB_ROUNDS:-2}"
  echo "== A/B sustained: this bundle and $other, $rounds alternating rounds"
  cp "$bin/libfa3.so" /tmp/fa3-ab-this.so
  case "$other" in
    *.xz) xz -dc "$other" > /tmp/fa3-ab-other.so ;;
    *) cp "$other" /tmp/fa3-ab-other.so ;;
  esac
  for round in $(seq 1 "$rounds"); do
    for side in this other; do
      cp "/tmp/fa3-ab-$side.so" "$bin/libfa3.so"
      log="/tmp/fa3-ab-sustained-$side-$round.txt"
      (cd bench && FA3_CACHE_DIR="/tmp/fa3-cache-ab-$side" "$PY" bench_sustained.py "${bench_args[@]}") \
        > "$log" 2>&1 || { echo "$side round $round failed:"; tail -5 "$log"; status=1; }
      { echo "== $side, round $round"; cat "$log"; } >> "$out/ab-sustained.txt"
      grep "^| [0-9v]" "$log" | sed "s/^/$side $round /"
    done
  done
  cp /tmp/fa3-ab-this.so "$bin/libfa3.so"
fi
if [ "$what" = bench-cast ]; then
  echo "== fa3-cast-fp8 chain benchmark"
  "$PY" bench/bench_cast_fp8.py --out "$out" 2>&1 | tee "$out/bench-cast.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
exit $status
