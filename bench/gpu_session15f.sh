#!/usr/bin/env bash
# session 15: the whole end-to-end suite on the GPU (wheels of the working tree), then Llama-style
# AMP training's own-process warm peak for coil (the scatter and padding changes touch its
# embedding gradient)
set -u
source bench/device_env.sh
timeout ${INTEGRATION_S:-420} python3 -m pytest -q -p no:cacheprovider tests-integration > $OUT/integration.log 2>&1
grep -E "passed|failed|FAILED|^E " $OUT/integration.log | tail -15
for c in ${CASES:-llama_style_train_amp}; do
  rm -rf /tmp/coil-cache
  timeout ${PER_RUN_S:-150} python3 -m coil.backend.bench_models $c coil > $OUT/peak_${c}_coil.log 2>&1
  echo "$c coil: $(grep -E '^(first_call_s|warm_peak)=' $OUT/peak_${c}_coil.log | tr '\n' ' ' | cut -c1-330)"
done
