#!/usr/bin/env bash
# session 27: where the HF inference cases' warm start goes, on the cases whose warm start stayed
# above a quarter of the cold one (GPT-2 and Llama-style inference): per CASE, coil cold into fresh
# folders, three warm runs (bench/compile_profile.py --case, all stage lines), one warm run under
# cProfile (pstats in $OUT/warm-CASE.pstats)
set -u
source bench/device_env.sh
for case in ${CASES:-gpt2_infer_bf16 llama_style_infer_bf16}; do
  d=/tmp/w27-$case; rm -rf $d
  for run in cold warm1 warm2 warm3 prof; do
    extra=""; [ $run = prof ] && extra="--cprofile-dump $OUT/warm-$case.pstats"
    echo "== $case $run"
    COIL_CACHE_DIR=$d/coil TRITON_CACHE_DIR=$d/triton TORCHINDUCTOR_CACHE_DIR=$d/inductor \
      timeout 150 python3 bench/compile_profile.py --case $case $extra 2>&1 \
      | grep -v -i warn | grep -v "^ *$" | cut -c1-110 | head -40
  done
done
