#!/usr/bin/env bash
# session 4, GPU validation: the Triton miscompile repro, the end-to-end tests this session touched
# (pooling incl. the channels-last bf16 stem backward, CUDA-graph segments and training graphs,
# dynamic shapes, inlining, reductions), the runtime's GPU tests, ResNet-50 stem gradient errors
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
python3 bench/triton_miscompile/check.py 2>&1 | tail -11 | tee "$OUT/miscompile.log"
timeout ${TEST_S:-330} python3 -m pytest -q -p no:cacheprovider -rfs --tb=short -p no:logging ${TESTS:-tests-integration/test_pooling.py \
  tests-integration/test_cuda_graph_segments.py tests-integration/test_dynamic_shapes.py tests-integration/test_inline.py \
  tests-integration/test_reductions.py} > "$OUT/tests.log" 2>&1; tail -40 "$OUT/tests.log"
timeout 60 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests -m gpu 2>&1 | tail -3 | tee "$OUT/runtime_gpu.log"
python3 bench/stem_grad_probe.py --layout cl 2>&1 | grep -v Warn | tail -4 | tee "$OUT/stem.log"
