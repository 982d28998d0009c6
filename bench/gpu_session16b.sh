#!/usr/bin/env bash
# session 16: tangents read through a pointer table (COIL_INDIRECT_INPUTS) and the inlined
# one-hot loss gradient: the GPU tests that touch them, then the AMP training steps' own-process
# warm peak for coil (MiB; Inductor's from 16a / session 15), with the table on and off
set -u
source bench/device_env.sh
timeout ${TESTS_S:-240} python3 -m pytest -q -p no:cacheprovider tests-integration/test_indirect_inputs.py \
  tests-integration/test_models.py tests-integration/test_inline.py > $OUT/tests.log 2>&1
grep -E "passed|failed|FAILED|^E " $OUT/tests.log | tail -8
timeout ${RT_S:-120} python3 -m pytest -q -p no:cacheprovider -m gpu packages/runtime/tests > $OUT/rt.log 2>&1
tail -2 $OUT/rt.log
for c in ${CASES:-llama_style_train_amp bert_base_train_amp gpt2_train_amp}; do
  for ind in ${MODES:-auto 0}; do
    rm -rf /tmp/coil-cache
    COIL_INDIRECT_INPUTS=$ind timeout ${PER_RUN_S:-170} python3 -m coil.backend.bench_models $c coil > $OUT/peak_${c}_${ind}.log 2>&1
    echo "$c indirect=$ind: $(grep -E '^(first_call_s|warm_peak)=' $OUT/peak_${c}_${ind}.log | tr '\n' ' ' | cut -c1-300)"
  done
done
