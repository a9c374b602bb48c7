#!/usr/bin/env bash
# One device-tool call: install, the integration/template/compare tests and the GPU-marked
# tests on CUDA, the fused-epilogue bench, and the A/B report of the transformer block.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | tail -1
timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-tests/test_routing.py tests/test_template.py tests/test_compare.py -m gpu} 2>&1 | tee "$OUT/pytest-integration.txt" | tail -30
if [ "${SKIP_AB:-0}" != 1 ]; then
  timeout 200 python3 -m inductor_mm_plugin compare examples/transformer_block.py:make --select all \
    --markdown "$OUT/ab-transformer-block.md" --json "$OUT/ab-transformer-block.json" 2>&1 | tee "$OUT/ab.txt" | tail -40
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  timeout ${BENCH_TIMEOUT:-300} python3 bench/bench_epilogue.py --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/epilogue.txt" | tail -40
fi
