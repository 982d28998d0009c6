#!/usr/bin/env bash
# session 28: what is left of the Llama-style inference warm start with the frontend cache: coil
# cold into fresh folders, two warm runs (bench/compile_profile.py --case), one under cProfile
# (pstats in $OUT/warm-CASE.pstats), one under `python -X importtime` ($OUT/importtime-CASE.txt)
set -u
source bench/device_env.sh
for case in ${CASES:-llama_style_infer_bf16}; do
  d=/tmp/w28-$case; rm -rf $d
  for run in cold warm1 warm2 prof imports; do
    extra=""; [ $run = prof ] && extra="--cprofile-dump $OUT/warm-$case.pstats"
    py="python3"; [ $run = imports ] && py="python3 -X importtime"
    echo "== $case $run"
    COIL_CACHE_DIR=$d/coil TRITON_CACHE_DIR=$d/triton TORCHINDUCTOR_CACHE_DIR=$d/inductor \
      timeout 150 $py bench/compile_profile.py --case $case $extra 2>$OUT/stderr-$case-$run.txt \
      | grep -v -i warn | grep -v "^ *$" | cut -c1-110 | head -30
  done
  grep "import time" $OUT/stderr-$case-imports.txt > $OUT/importtime-$case.txt; rm -f $OUT/stderr-$case-imports.txt
done
