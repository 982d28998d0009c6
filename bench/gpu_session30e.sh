#!/usr/bin/env bash
# session 30: this session's kernels through the backend on the GPU: the integration tests of
# reductions (online variance, forced strategies), channels-last batch norms (the outer tiling)
# and inlining
set -u
NO_PYC=1 source bench/device_env.sh
timeout ${SUITE_S:-150} python3 -m pytest -q -p no:cacheprovider tests-integration/test_reductions.py \
  tests-integration/test_channels_last.py tests-integration/test_inline.py 2>&1 \
  | grep -v -i "warning:\|warn(" | grep "passed\|failed\|FAILED\|Error" | tail -8
