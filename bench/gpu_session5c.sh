#!/usr/bin/env bash
# session 5: training CUDA graphs by default: GPU tests (CUDA graphs, channels-last, models) and
# coil bench on ResNet-50's and GPT-2's AMP training steps (accuracy from a replayed call; peak
# including CUDA-graph pools)
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
timeout 200 python3 -m pytest -q -p no:cacheprovider --show-capture=no --tb=short tests-integration/test_cuda_graph_segments.py \
  tests-integration/test_models.py tests-integration/test_channels_last.py 2>&1 | grep -v "^DEBUG" | tail -25
timeout 420 python3 -m coil.backend.cli bench ${CASES:-resnet50_train_amp gpt2_train_amp} --out $OUT/bench --budget-s 400 2>&1 | tail -2
cat $OUT/bench/bench.md
