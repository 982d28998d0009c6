#!/usr/bin/env bash
# session 24: inference CUDA graphs hand their outputs out uncloned (coil.runtime.lazy_outputs,
# COIL_CUDA_GRAPH_LAZY_CLONES). GPU tests of the runner and the backend first, then each inference
# case's step time and warm peak with the knob off and on (knob_ab: same wheels, same caches)
set -u
source bench/device_env.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests/test_gpu_fast.py \
  tests-integration/test_cuda_graph_segments.py tests-integration/test_models.py > $OUT/tests.log 2>&1
grep -E "passed|failed|FAILED|^E " $OUT/tests.log | tail -12
ROUNDS=${ROUNDS:-2} knob_ab COIL_CUDA_GRAPH_LAZY_CLONES ${CASES:-gpt2_infer_bf16 llama_style_infer_bf16 bert_base_infer_bf16 resnet50_infer_bf16 vit_b16_infer_bf16}
