#!/usr/bin/env bash
# session 4, numbers: the micro suite and the ResNet-50 / GPT-2 / Llama-style training steps
# (coil bench: eager, Inductor, coil in one process), what is live at ResNet-50's peak
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 560 python3 -m coil.backend.cli bench ${CASES:-micro} --out $OUT/bench --budget-s ${BUDGET:-540} 2>&1 | tail -3
cat $OUT/bench/bench.md | head -40
