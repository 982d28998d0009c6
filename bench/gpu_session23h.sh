#!/usr/bin/env bash
# session 23: AOTAutograd's copy_ epilogue as one _foreach_copy_ (not landed: wheels built with
# bench/experiments/session23_foreach_copy_epilogue.patch applied; lowering-ir epilogue.py):
# ResNet-50 training's step with the wheels of the commit before (.whl_old) and this tree's
# (train_ab), one profile of this tree's step (copies left), and the CUDA-graph tests (batch
# norm's buffers under training CUDA graphs)
set -u
source bench/device_env.sh
ROUNDS=${ROUNDS:-2} train_ab resnet50_train_amp
COIL_CACHE_DIR=/tmp/coil-cache-resnet50_train_amp-site timeout 100 python3 bench/profile_model.py $OUT/prof resnet50_train_amp --only coil --top 40 2>&1 \
  | grep -v -i warn | grep "===\|memcpy\|Memcpy\|foreach\|first call" | cut -c1-150
timeout 120 python3 -m pytest -q -p no:cacheprovider tests-integration/test_cuda_graph_segments.py > $OUT/tests.log 2>&1
grep -E "passed|failed|FAILED|^E " $OUT/tests.log | tail -8
