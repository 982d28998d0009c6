#!/usr/bin/env bash
# session 24: the micro suite against Inductor (micro_bench: 16 cases, copy bandwidth in the same
# run), then where a warm first call of BERT and Llama-style inference goes, coil beside Inductor
# (bench/compile_profile.py --case: one cold run into fresh cache folders, then one warm run)
set -u
source bench/device_env.sh
MICRO_BENCH_S=${MICRO_BENCH_S:-240} micro_bench $OUT/micro
for case in ${CASES:-bert_base_infer_bf16 llama_style_infer_bf16}; do
  for compiler in coil inductor; do
    d=/tmp/cp-$case-$compiler; rm -rf $d
    for run in cold warm; do
      echo "== $case $compiler $run"
      COIL_CACHE_DIR=$d/coil TRITON_CACHE_DIR=$d/triton TORCHINDUCTOR_CACHE_DIR=$d/inductor timeout 100 \
        python3 bench/compile_profile.py --case $case --compiler $compiler 2>&1 \
        | grep "first call\|second call\|Dynamo capture\|AOTAutograd\|runtime compile\|coil stages\|pre-grad" | cut -c1-140
    done
  done
done
