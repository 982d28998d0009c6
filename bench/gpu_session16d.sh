#!/usr/bin/env bash
# session 16: parameters' casts recomputed in the backward (COIL_RECOMPUTE_PARAM_CASTS): the GPU
# tests that touch it, the AMP training steps' own-process warm peak with it on and off, and
# coil's step time on and off (bench/train_step_time.py, alternating, two rounds)
set -u
source bench/device_env.sh
timeout ${TESTS_S:-240} python3 -m pytest -q -p no:cacheprovider tests-integration/test_param_casts.py \
  tests-integration/test_indirect_inputs.py tests-integration/test_models.py > $OUT/tests.log 2>&1
grep -E "passed|failed|FAILED|^E " $OUT/tests.log | tail -8
for c in ${CASES:-llama_style_train_amp bert_base_train_amp gpt2_train_amp}; do
  for r in ${MODES:-1 0}; do
    rm -rf /tmp/coil-cache
    COIL_RECOMPUTE_PARAM_CASTS=$r timeout ${PER_RUN_S:-170} python3 -m coil.backend.bench_models $c coil > $OUT/peak_${c}_${r}.log 2>&1
    echo "$c recompute=$r: $(grep -E '^(first_call_s|warm_peak)=' $OUT/peak_${c}_${r}.log | tr '\n' ' ' | cut -c1-140)"
  done
done
for round in 1 2; do
  for r in 1 0; do
    COIL_RECOMPUTE_PARAM_CASTS=$r COIL_CACHE_DIR=/tmp/coil-cache-t$r timeout ${TIME_S:-120} \
      python3 bench/train_step_time.py ${TIME_CASE:-llama_style_train_amp} recompute=$r 2>&1 | tail -1
  done
done
