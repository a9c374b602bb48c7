#!/usr/bin/env bash
# One device-tool call that checks and measures in parallel on a two-GPU machine
# (nvidia-h200-x2): GPU 0 runs the tests, GPU 1 the benchmarks; one GPU runs them in turn.
#   FULL_SUITE=1                           the whole test suite (4 processes over the GPUs), nothing else
#   TESTS="tests/test_template.py ..."  (default: the integration, template and kernel tests)
#   BENCHES="bmm epilogue ab mm breakdown" (default: bmm epilogue ab)
#   TESTS2="..."                           (optional second pytest run, after the first)
#   BENCH_BMM_ARGS, BENCH_MM_ARGS, BREAKDOWN_ARGS  (extra arguments of bench_bmm.py / bench_mm.py / epilogue_breakdown.py)
#   TEST_TIMEOUT, BENCH_TIMEOUT            (seconds; default 520 each)
# Snapshot first (from the repo root): rm -rf .clean && mkdir .clean && git archive HEAD | tar -x -C .clean
#   && git rev-parse --short HEAD > .clean/.commit; then run `cd .clean && bash tools/gpu_check.sh`
#   with carry [".clean"] (.clean is ignored through .git/info/exclude).
# $OUT gets at most 8 files (the device tool's limit): pytest.txt, bench.log and the results.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | tail -2
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$GPUS" -ge 1 ] || GPUS=1  # no GPU: the tests run on the CPU (a dry run of this script)
TESTS=${TESTS:-tests/test_cache.py tests/test_compare.py tests/test_routing.py tests/test_template.py tests/test_kernel_paths.py}
BENCHES=${BENCHES:-bmm epilogue ab}

run_tests() {
  timeout "${TEST_TIMEOUT:-520}" python3 -m pytest -q -p no:cacheprovider -rfE --durations=10 $TESTS >"$OUT/pytest.txt" 2>&1
  echo "pytest exit $?" >>"$OUT/pytest.txt"
  if [ -n "${TESTS2:-}" ]; then
    timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE $TESTS2 >>"$OUT/pytest.txt" 2>&1
    echo "pytest (2) exit $?" >>"$OUT/pytest.txt"
  fi
}

run_benches() {
  local scratch=/tmp/bench_out
  mkdir -p "$scratch"
  {
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    for b in $BENCHES; do
      echo "=== $b"
      case $b in
        bmm) timeout 200 python3 bench/bench_bmm.py --out "$scratch" ${BENCH_BMM_ARGS:-} ;;
        epilogue) timeout 330 python3 bench/bench_epilogue.py --quick --out "$scratch" ;;
        ab) timeout 240 python3 -m inductor_mm_plugin compare examples/transformer_block.py:make --select all \
              --markdown "$scratch/ab-transformer-block.md" --json "$scratch/ab-transformer-block.json" ;;
        breakdown) TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 timeout 420 python3 bench/epilogue_breakdown.py \
              --code "$scratch/code" ${BREAKDOWN_ARGS:-}
              tar czf "$OUT/breakdown-code.tgz" -C "$scratch" code ;;
        mm) timeout 400 python3 bench/bench_mm.py --out "$scratch" --commit "$COMMIT" ${BENCH_MM_ARGS:-} ;;
      esac
      cp "$scratch"/*.json "$scratch"/*.md "$OUT"/ 2>/dev/null  # after each: a timeout keeps the rest
    done
  } >"$OUT/bench.log" 2>&1
}

# The snapshot's commit: written to .commit when the snapshot is made (the device copy's
# git metadata can be stale), else git's.
COMMIT=$(cat .commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "${FULL_SUITE:-0}" = 1 ]; then
  # The whole suite in four pytest processes, two per GPU (it compiles on the CPU most of
  # the time; one process took over ten minutes on its own). No benchmarks.
  groups=("tests/test_routing.py" "tests/test_compare.py tests/test_cache.py tests/test_template.py"
          "tests/test_kernel_paths.py tests/test_tuning_cache.py tests/test_compat.py"
          "tests/test_ops.py tests/test_autograd.py tests/test_fallback_and_errors.py")
  for i in 0 1 2 3; do
    (CUDA_VISIBLE_DEVICES=$((i % GPUS)) timeout "${TEST_TIMEOUT:-540}" python3 -m pytest -q -p no:cacheprovider -rfE \
      ${groups[$i]} >"$OUT/pytest-$i.txt" 2>&1; echo "pytest exit $?" >>"$OUT/pytest-$i.txt") &
  done
  wait
  for i in 0 1 2 3; do echo "== ${groups[$i]}"; grep -E "^(FAILED|ERROR)|passed|failed|pytest exit" "$OUT/pytest-$i.txt"; done
  exit 0
fi

export OUT TESTS BENCHES COMMIT BENCH_MM_ARGS=${BENCH_MM_ARGS:-} BENCH_BMM_ARGS=${BENCH_BMM_ARGS:-} BREAKDOWN_ARGS=${BREAKDOWN_ARGS:-}
export -f run_benches
if [ "$GPUS" -ge 2 ]; then
  (CUDA_VISIBLE_DEVICES=0 run_tests) &
  (CUDA_VISIBLE_DEVICES=1 timeout "${BENCH_TIMEOUT:-520}" bash -c run_benches) &
  wait
else
  run_tests
  timeout "${BENCH_TIMEOUT:-520}" bash -c run_benches
fi
tail -25 "$OUT/pytest.txt"
tail -40 "$OUT/bench.log"
ls "$OUT"
