#!/usr/bin/env bash
# session 16: after each thread's side-stream cuBLAS workspace gets a segment of its own
# (runtime cudagraph._blas_workspace_apart): the runtime's GPU tests, then the AMP training
# steps' own-process warm peak (parameters' casts recomputed, the default)
set -u
source bench/device_env.sh
timeout ${RT_S:-120} python3 -m pytest -q -p no:cacheprovider -m gpu packages/runtime/tests > $OUT/rt.log 2>&1
tail -1 $OUT/rt.log
for c in ${CASES:-gpt2_train_amp llama_style_train_amp bert_base_train_amp}; do
  rm -rf /tmp/coil-cache
  timeout ${PER_RUN_S:-170} python3 -m coil.backend.bench_models $c coil > $OUT/peak_${c}.log 2>&1
  echo "$c: $(grep -E '^(first_call_s|warm_peak)=' $OUT/peak_${c}.log | tr '\n' ' ' | cut -c1-330)"
done
