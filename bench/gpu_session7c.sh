#!/usr/bin/env bash
# session 7: the whole GPU test suite (tests-integration on CUDA, runtime GPU tests), the demo, then
# `coil bench micro` (eager, Inductor, coil in one process)
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 270 python3 -m pytest -q -p no:cacheprovider --tb=short -x --deselect tests-integration/opinfo tests-integration \
  > $OUT/integration.log 2>&1; grep -v "^DEBUG" $OUT/integration.log | tail -12 | cut -c1-400
timeout 60 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests -m gpu 2>&1 | tail -2
timeout 250 python3 -m coil.backend.cli bench micro --out $OUT/micro --budget-s 240 2>&1 | grep "done in" | tail -3
cat $OUT/micro/bench.md 2>/dev/null | head -40
