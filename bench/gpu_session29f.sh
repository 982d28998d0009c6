#!/usr/bin/env bash
# session 29: online variance on the GPU through the backend: forced looped layer norm and
# var_mean (fp32, bf16) against eager, with the other forced-strategy and online tests. Not run in
# session 29 (its device time was spent): the first thing to run next session
set -u
NO_PYC=1 source bench/device_env.sh
timeout ${SUITE_S:-80} python3 -m pytest -q -p no:cacheprovider tests-integration/test_reductions.py -k "online or forced" 2>&1 \
  | grep -v -i "warning:\|warn(" | tail -4
