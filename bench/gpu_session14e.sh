#!/usr/bin/env bash
# (ran with wheels built from ff6a96c + bench/experiments/session14_late_inputs.patch)
# session 14, final wheels: the runtime's GPU tests, the end-to-end CUDA-graph tests on the GPU and
# the demo.
set -u
source bench/device_env.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests -m gpu > $OUT/runtime_gpu.log 2>&1
tail -2 $OUT/runtime_gpu.log
timeout 150 python3 -m pytest -q -p no:cacheprovider -rx tests-integration/test_cuda_graph_segments.py > $OUT/integration_cg.log 2>&1
tail -4 $OUT/integration_cg.log | cut -c1-250
timeout 120 python3 -m coil.backend.cli demo 2>&1 | grep -v '^\[transformers\]' | tail -6
