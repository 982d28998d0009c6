#!/usr/bin/env bash
# session 26: where a warm start goes on the cases whose warm start was far above a quarter of the
# cold one in 26a (ResNet-50 and BERT inference): per CASE, coil cold into fresh folders, two warm
# runs (bench/compile_profile.py --case, all stage lines), one warm run under cProfile (pstats in
# $OUT/warm-CASE.pstats), then Inductor cold and warm in folders of its own
set -u
source bench/device_env.sh
for case in ${CASES:-resnet50_infer_bf16 bert_base_infer_bf16}; do
  for comp in coil inductor; do
    d=/tmp/w26-$case-$comp; rm -rf $d
    for run in cold warm1 warm2 prof; do
      [ $comp = inductor ] && [ $run = warm2 -o $run = prof ] && continue
      extra=""; [ $run = prof ] && extra="--cprofile-dump $OUT/warm-$case.pstats"
      echo "== $case $comp $run"
      COIL_CACHE_DIR=$d/coil TRITON_CACHE_DIR=$d/triton TORCHINDUCTOR_CACHE_DIR=$d/inductor \
        timeout 150 python3 bench/compile_profile.py --case $case --compiler $comp $extra 2>&1 \
        | grep -v -i warn | grep -v "^ *$" | cut -c1-110 | head -40
    done
  done
done
