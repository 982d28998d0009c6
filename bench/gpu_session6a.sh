#!/usr/bin/env bash
# session 6: GPU tests (CUDA graphs incl. training, channels-last with cudnn.flags, autotuning
# end to end, runtime GPU tests) and bench/autotune_probe.py on coil bench's micro cases
# (COIL_AUTOTUNE off vs on, 16384 x 8192, bf16 and fp32)
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout 260 python3 -m pytest -q -p no:cacheprovider --show-capture=no --tb=short \
  tests-integration/test_cuda_graph_segments.py tests-integration/test_channels_last.py \
  tests-integration/test_autotune.py packages/runtime/tests/test_gpu.py packages/runtime/tests/test_gpu_fast.py \
  packages/runtime/tests/test_autotune.py 2>&1 | grep -v "^DEBUG" | tail -25
timeout 300 python3 bench/autotune_probe.py --json $OUT/autotune_probe.json 2>&1 | grep -v "^DEBUG" | tail -60
