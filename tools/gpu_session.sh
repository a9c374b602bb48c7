#!/usr/bin/env bash
# One device-tool call on the GPU machine: install, run the GPU tests, run the benchmark.
#   run: bash tools/gpu_session.sh [bench args...]
# Logs and results land in $OUT (the device tool brings them back).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} 2>&1 | tee "$OUT/env.txt"
python3 -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | tail -2
python3 -m pytest -q -x ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest.txt" | tail -25
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 bench/bench_mm.py --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.txt" | tail -80
fi
