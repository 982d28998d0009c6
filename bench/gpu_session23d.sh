#!/usr/bin/env bash
# session 23: module buffers as static CUDA-graph inputs (coil.backend.static_inputs): training
# and inference step times with the wheels of the commit before (.whl_old) and this tree's
# (train_ab, which also takes inference cases since 23a), one profile of ResNet-50 training with
# this tree's (kernels and copies per step), then the CUDA-graph integration tests
set -u
source bench/device_env.sh
ROUNDS=${ROUNDS:-3} train_ab ${CASES:-resnet50_train_amp resnet50_infer_bf16}
COIL_CACHE_DIR=/tmp/coil-cache-resnet50_train_amp-site timeout 120 python3 bench/profile_model.py $OUT/prof resnet50_train_amp --only coil --top 8 2>&1 \
  | grep -v -i warn | grep "===\|ms \|first call" | cut -c1-150
timeout 150 python3 -m pytest -q -p no:cacheprovider tests-integration/test_cuda_graph_segments.py > $OUT/tests.log 2>&1
grep -E "passed|failed|FAILED|^E " $OUT/tests.log | tail -8
