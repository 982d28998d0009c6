#!/usr/bin/env bash
# session 24: (1) the runtime's GPU tests and the CUDA-graph integration tests in one process,
# the order that failed in 24a, with the memory test now measuring in a process of its own;
# (2) who holds coil's inference warm peak beside Inductor's (bench/memory_probe.py)
set -u
source bench/device_env.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests/test_gpu_fast.py \
  tests-integration/test_cuda_graph_segments.py > $OUT/tests.log 2>&1
grep -E "passed|failed|FAILED|^E  .*Assert" $OUT/tests.log | tail -6
for case in ${CASES:-gpt2_infer_bf16 resnet50_infer_bf16}; do
  timeout ${PROBE_S:-200} python3 bench/memory_probe.py $case inductor,coil 2>/dev/null | grep '^{' > $OUT/mem-$case.jsonl
  python3 bench/memory_probe.py --print $OUT/mem-$case.jsonl
done
