#!/usr/bin/env bash
# The end-to-end suite and the demo on a GPU (device tool): bash bench/gpu_tests.sh
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
python3 -m pytest -q -p no:cacheprovider tests-integration 2>&1 | tail -15 | tee "$OUT/integration.log"
python3 -m pytest -q -p no:cacheprovider packages/runtime/tests -m gpu 2>&1 | tail -5 | tee "$OUT/runtime_gpu.log"
python3 -m coil.backend.cli demo 2>&1 | grep -v '^\[transformers\]' | tee "$OUT/demo.log"
