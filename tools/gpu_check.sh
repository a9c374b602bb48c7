#!/usr/bin/env bash
# Check and measure the package on a CUDA host: install it, run the GPU tests, run benchmarks,
# and leave every log and result in one folder.
#
#   bash tools/gpu_check.sh [--out DIR] [--tests "PYTEST ARGS" | --no-tests] [--bench NAME]... [--parallel]
#                           [--shards N]
#
#   --out DIR        where everything goes (default: $OUT, else ./gpu-check-out)
#   --tests ARGS     pytest arguments (default: -m gpu); --no-tests skips pytest
#   --bench NAME     a benchmark to run after the tests, repeatable, in order; NAME is one of
#                    mm bmm epilogue shapes models ab sweep selector swiglu overlap (bench/<script>.py), with
#                    extra arguments after a colon, split as a shell would: --bench "shapes:--suite random"
#                    --bench "ab:--base 0ceed64" --bench "overlap:--configs '128x128 w4 s4 1/SM flat'"
#   --timeout S      seconds per benchmark (default 540) and for pytest (default 900)
#   --parallel       with two or more GPUs: the tests on GPU 0 while the benchmarks run on GPU 1
#   --shards N       the tests as N pytest processes side by side, the test files dealt out by
#                    their measured seconds (the GPU suite is compile-bound: 16 cores, one GPU); their logs
#                    one after another in pytest-shards.txt
#
# Results: each benchmark appends its JSONL rows to DIR/results/<name>.jsonl (a fresh file per
# run; append them to bench/results/ in the repository to keep them) and its output to
# DIR/bench.log; pytest writes DIR/pytest.txt; DIR/setup.log has the GPU, driver, versions and
# the install's output. Few files on purpose: some runners bring back only a handful.
# The commit recorded in the rows is .commit at the repo root if present (write it where the
# tree is a copy without git history: git rev-parse --short HEAD > .commit), else git's.
# Exit status: pytest's (0 with --no-tests); a benchmark's failure shows in its log.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-./gpu-check-out}
TEST_ARGS="-m gpu"
RUN_TESTS=1
BENCHES=()
BENCH_TIMEOUT=540
TEST_TIMEOUT=900
PARALLEL=0
SHARDS=1
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --tests) TEST_ARGS=$2; shift 2 ;;
    --no-tests) RUN_TESTS=0; shift ;;
    --bench) BENCHES+=("$2"); shift 2 ;;
    --timeout) BENCH_TIMEOUT=$2; TEST_TIMEOUT=$2; shift 2 ;;
    --parallel) PARALLEL=1; shift ;;
    --shards) SHARDS=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT/results"
OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}

COMMIT=$(cat .commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
{
  date -Iseconds
  echo "commit $COMMIT"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  $PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
} >"$OUT/setup.log" 2>&1
cat "$OUT/setup.log"
echo "--- pip install --no-build-isolation --no-deps -e ." >>"$OUT/setup.log"
$PY -m pip install --no-build-isolation --no-deps -e . >>"$OUT/setup.log" 2>&1 || {
  echo "pip install failed (the bench scripts still import this tree's package): $OUT/setup.log"
  tail -5 "$OUT/setup.log"; }

script_of() {
  case $1 in
    mm) echo bench/bench_mm.py ;; bmm) echo bench/bench_bmm.py ;; epilogue) echo bench/bench_epilogue.py ;;
    shapes) echo bench/shapes.py ;; models) echo bench/models.py ;; ab) echo bench/ab.py ;;
    sweep) echo bench/sweep_configs.py ;; selector) echo bench/sweep_selector.py ;;
    swiglu) echo bench/sweep_swiglu.py ;; overlap) echo bench/probe_overlap.py ;; *) return 1 ;;
  esac
}

pytest_to() {  # LOG, then pytest arguments
  local log=$1; shift
  # shellcheck disable=SC2086  (the arguments are split on purpose)
  timeout "$TEST_TIMEOUT" $PY -m pytest -q -p no:cacheprovider -rfE --durations=10 "$@" $TEST_ARGS >"$log" 2>&1
  local rc=$?
  echo "pytest exit $rc" >>"$log"
  return $rc
}

run_tests() {
  [ "$RUN_TESTS" = 1 ] || return 0
  [ "$SHARDS" -gt 1 ] || { pytest_to "$OUT/pytest.txt"; return; }
  # Longest pieces first, each to the shard with the fewest seconds so far. A piece is a test
  # file, or one test of a file whose GPU seconds alone would bound the wall time (H100,
  # 151daa3, --shards 8: 190 s in all, test_export.py's 188 s of it); the rest of that file
  # runs in its own piece with the split tests deselected, so a test added later still runs.
  # Seconds: measured for the slow files, split evenly over their tests, else about 0.5 s per
  # KiB of test file; test_predict's 30 is an estimate.
  mapfile -t shards < <($PY - "$SHARDS" <<'PY'
import pathlib, sys
SLOW = {"test_export.py": 188, "test_cache.py": 169, "test_distributed.py": 75, "test_transformers.py": 67,
        "test_predict.py": 30}
# A file's GPU test cases, and the tests that run as pieces of their own with their cases
# (a test named without its parameters stands for all of them). The counts only weigh the
# seconds: a stale one misplaces an estimate, never a test.
SPLIT = {
    "test_export.py": (9, {"test_gpu_aoti_with_templates": 2, "test_gpu_aoti_obeys_markers": 2,
                           "test_gpu_cpp_wrapper_with_templates": 3}),
    "test_cache.py": (2, {"test_gpu_predicates_get_fresh_routing_across_processes[by_global-hits0]": 1}),
}
n = int(sys.argv[1])
pieces = {}  # a piece's pytest arguments -> (its seconds, its file)
for f in pathlib.Path("tests").glob("test_*.py"):
    seconds = SLOW.get(f.name, f.stat().st_size / 2048)
    cases, split = SPLIT.get(f.name, (1, {}))
    if len(split) >= n:  # too few shards to keep its pieces apart: the file runs whole
        split = {}
    for test, k in split.items():
        pieces[f"{f}::{test}"] = (seconds * k / cases, f)
    rest = [str(f)] + [f"--deselect={f}::{test}" for test in split]
    pieces[" ".join(rest)] = (seconds * (cases - sum(split.values())) / cases, f)
bins = [[0.0, [], set()] for _ in range(n)]
for piece, (seconds, f) in sorted(pieces.items(), key=lambda p: -p[1][0]):
    # Never two pieces of one file in a shard: a piece's --deselect would drop the other.
    b = min((b for b in bins if f not in b[2]), key=lambda b: b[0])
    b[0] += seconds
    b[1].append(piece)
    b[2].add(f)
print("\n".join(" ".join(args) for _, args, _ in bins if args))
PY
)
  local pids=() rc=0 i
  [ "${#shards[@]}" -gt 0 ] || { echo "gpu_check.sh: the shard plan is empty" | tee "$OUT/pytest.txt"; return 1; }
  rm -f "$OUT"/pytest-*.txt  # a reused folder's old shards would enter the summary
  for i in "${!shards[@]}"; do
    # Split on spaces, not globbed: a test id's [params] reads as a glob.
    # shellcheck disable=SC2086
    set -f; pytest_to "$OUT/pytest-$i.txt" ${shards[$i]} & set +f
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || rc=1; done
  cat "$OUT"/pytest-*.txt | grep -E "passed|failed|skipped|error|^FAILED|^ERROR|pytest exit" >"$OUT/pytest.txt"
  # One file for all the shards' logs: some runners bring back only a handful of files.
  for i in "${!shards[@]}"; do
    echo "=== shard $i: ${shards[$i]}"; cat "$OUT/pytest-$i.txt"
  done >"$OUT/pytest-shards.txt"
  rm -f "$OUT"/pytest-[0-9]*.txt
  return $rc
}

run_benches() {
  for spec in "${BENCHES[@]+"${BENCHES[@]}"}"; do
    name=${spec%%:*}
    args=""
    [ "$name" != "$spec" ] && args=${spec#*:}
    script=$(script_of "$name") || { echo "=== unknown benchmark $name" | tee -a "$OUT/bench.log"; continue; }
    echo "=== $name: $script $args ($(date -Iseconds))" | tee -a "$OUT/bench.log"
    # Split as a shell would, quotes kept: probe_overlap's config names have spaces.
    mapfile -t argv < <($PY -c 'import shlex, sys; sys.stdout.writelines(a + "\n" for a in shlex.split(sys.argv[1]))' "$args")
    timeout "$BENCH_TIMEOUT" $PY "$script" --out "$OUT/results" --commit "$COMMIT" "${argv[@]+"${argv[@]}"}" \
      >>"$OUT/bench.log" 2>&1
    echo "=== $name exit $? ($(date -Iseconds))" | tee -a "$OUT/bench.log"
  done
}

GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
rc=0
if [ "$PARALLEL" = 1 ] && [ "$GPUS" -ge 2 ]; then
  (CUDA_VISIBLE_DEVICES=0 run_tests) &
  tests_pid=$!
  CUDA_VISIBLE_DEVICES=1 run_benches
  wait "$tests_pid" || rc=$?
else
  run_tests || rc=$?
  run_benches
fi

[ "$RUN_TESTS" = 1 ] && tail -15 "$OUT/pytest.txt"
[ ${#BENCHES[@]} -gt 0 ] && { echo "--- last lines of $OUT/bench.log"; tail -60 "$OUT/bench.log"; }
ls -R "$OUT" | head -40
exit $rc
