#!/usr/bin/env bash
# session 13: correctness on the GPU of the wheels in .whl (there: main with
# bench/experiments/session13_static_sizes.patch): the end-to-end suite (real kernels compiled for
# the GPU; stops at the first failure), the runtime's GPU tests and the demo
set -u
source bench/device_env.sh
# the whole log lands in $OUT (the failure's traceback comes back with the files)
timeout ${INTEGRATION_S:-420} python3 -m pytest -q -p no:cacheprovider -x tests-integration > $OUT/integration.log 2>&1
tail -12 $OUT/integration.log
timeout 120 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests -m gpu 2>&1 | tail -3
timeout 120 python3 -m coil.backend.cli demo 2>&1 | grep -v '^\[transformers\]' | tail -8
