#!/usr/bin/env bash
# session 15: late inputs (bench/experiments/session14_late_inputs.patch applied on 242d5cf, wheels
# in .whl_late) against main's wheels (.whl): GPT-2 AMP training's own-process warm peak
# (`python -m coil.backend.bench_models`), COIL_LATE_INPUTS=1 and 0, and Inductor
set -u
source bench/device_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site_late .whl_late/*.whl || exit 1
python3 -m compileall -q -j 16 /tmp/site_late > /dev/null 2>&1
for run in ${RUNS:-late:1 late:0 main:0 inductor:0}; do
  v=${run%%:*}; late=${run##*:}; site=/tmp/site; mode=coil
  [ $v = late ] && site=/tmp/site_late
  [ $v = inductor ] && mode=inductor
  rm -rf /tmp/coil-cache /tmp/inductor-cache
  for c in ${CASES:-gpt2_train_amp}; do
    PYTHONPATH=$site COIL_LATE_INPUTS=$late TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache timeout ${PER_RUN_S:-150} \
      python3 -m coil.backend.bench_models $c $mode > $OUT/peak_${c}_${v}_$late.log 2>&1
    echo "$c $v late=$late: $(grep -E '^(first_call_s|warm_peak)=' $OUT/peak_${c}_${v}_$late.log | tr '\n' ' ' | cut -c1-330)"
  done
done
