#!/usr/bin/env bash
# session 3: ResNet-50 layouts (bench/resnet_layout.py) and the ResNet-50 training memory with
# coil alone in its process (does a previous mode's model stay alive?), runtime GPU tests
set -u
OUT=${OUT:-out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/cc
timeout 60 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests/test_gpu.py packages/runtime/tests/test_gpu_fast.py 2>&1 | tail -4
timeout 150 python3 bench/memory_breakdown.py resnet50_train_amp coil 2>&1 | grep -E "^\S.*\|" | tail -3
timeout 330 python3 bench/resnet_layout.py --modes coil,inductor --cases infer,train --out $OUT 2>&1 | grep -v Warning | tail -30
