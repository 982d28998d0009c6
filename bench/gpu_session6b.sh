#!/usr/bin/env bash
# session 6: coil bench on ResNet-50's and GPT-2's AMP training steps (training CUDA graphs and
# autotuning on by default; warm peak = max_memory_reserved over a warm call after empty_cache)
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
timeout 560 python3 -m coil.backend.cli bench ${CASES:-resnet50_train_amp gpt2_train_amp} --out $OUT/bench --budget-s 520 2>&1 | grep -v "^DEBUG" | tail -4
cat $OUT/bench/bench.md
