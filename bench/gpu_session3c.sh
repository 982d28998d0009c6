#!/usr/bin/env bash
# session 3, verification on the GPU of the inlining, reduction tiling/split, pooling and
# channels-last work: GPU tests, then the probes that motivated each change.
set -u
OUT=${OUT:-out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/cc
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
timeout 240 python3 -m pytest -q -x -p no:cacheprovider packages/runtime/tests tests-integration/test_pooling.py \
  tests-integration/test_reductions.py tests-integration/test_inline.py tests-integration/test_channels_last.py 2>&1 | tail -6
timeout 100 python3 bench/reduce_probe.py --cases sum,var_mean eager inductor coil 2>&1 | grep -v Warning | tail -24
for c in gpt2_train_amp resnet50_train_amp; do
  timeout 150 python3 bench/memory_breakdown.py $c inductor coil 2>&1 | grep -E "^\S.*\|| coil graph" | tail -8
done
