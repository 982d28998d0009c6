#!/usr/bin/env bash
# session 5: CUDA graphs for training on by default (shared forward/backward pool, gradients
# uncloned): the GPU tests of the CUDA-graph and model suites, which part of GPT-2's AOTAutograd
# cache entry holds a CUDA tensor, and coil bench on ResNet-50's AMP training step
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
timeout 200 python3 -m pytest -q -p no:cacheprovider -x tests-integration/test_cuda_graph_segments.py \
  tests-integration/test_models.py tests-integration/test_channels_last.py 2>&1 | tail -15
timeout 100 python3 bench/aot_pickle_probe.py gpt2_train_amp 2>&1 | grep -v Warn | grep '\[probe\]\|^    ' | head -30
timeout 280 python3 -m coil.backend.cli bench ${CASES:-resnet50_train_amp} --out $OUT/bench --budget-s 270 2>&1 | tail -2
cat $OUT/bench/bench.md
