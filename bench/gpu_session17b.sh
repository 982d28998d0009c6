#!/usr/bin/env bash
# session 17: coil bench's warm first call of a case (`python -m coil.backend.bench_models CASE
# coil`, the process `coil bench` starts) against compile_profile's on the same cache folders:
# cold, warm twice, warm under cProfile (whole profile in $OUT), then compile_profile warm
set -u
source bench/device_env.sh
case=${CASE:-gpt2_train_amp}
C=/tmp/b17_$case; rm -rf $C; mkdir -p $C
export COIL_CACHE_DIR=$C/coil TRITON_CACHE_DIR=$C/triton TORCHINDUCTOR_CACHE_DIR=$C/inductor
for k in cold warm warm2 warmprof; do
  extra=""; [ $k = warmprof ] && extra="-m cProfile -o $OUT/bm_${case}_warm.prof"
  echo "== bench_models $case coil $k"
  timeout ${PER_RUN_S:-150} python3 $extra -m coil.backend.bench_models $case coil 2>&1 | grep "first_call_s\|graph_caches\|Error" | cut -c1-1200
done
echo "== compile_profile $case coil warm"
timeout ${PER_RUN_S:-150} python3 bench/compile_profile.py --case $case --json $OUT/cp_${case}_warm.json 2>&1 | grep "first call\|Dynamo\|AOTAutograd\|runtime\|graph" | cut -c1-200
ps aux | grep -c "[p]ython3" ; ps aux | grep "[p]ython3" | head -5 | cut -c1-200
