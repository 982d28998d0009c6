#!/usr/bin/env bash
# session 29: the end-to-end suite on the GPU with static sizes in kernel bodies (masks chosen at
# compile time) and the 1024 / 4 pointwise candidate; session 13's version of the static sizes
# stopped at a GPU test failure that was never explained (docs/perf.md, session 13)
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout ${SUITE_S:-520} python3 -m pytest -q -p no:cacheprovider -x tests-integration 2>&1 | grep -v -i "warning:\|warn(" | tail -12
