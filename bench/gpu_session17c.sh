#!/usr/bin/env bash
# session 17: what a warm start sends to the compile workers (bench/warm_jobs_probe.py), before
# (.whl_old, /tmp/site_old) and after (.whl) kernels compiled on threads leave their markers:
# per case in CASES and wheel set, cold, warm, warm again, each a new process on one set of cache
# folders; then `coil bench` of CASES_BENCH with .whl (bench/gpu_session12d.sh)
set -u
source bench/device_env.sh
old_wheels || echo "no .whl_old"
for case in ${CASES:-gpt2_train_amp}; do
  for site in /tmp/site_old /tmp/site; do
    C=/tmp/c17_${case}_$(basename $site); rm -rf $C; mkdir -p $C
    for k in cold warm warm2; do
      echo "== $case $(basename $site) $k"
      PYTHONPATH=$site COIL_CACHE_DIR=$C/coil TRITON_CACHE_DIR=$C/triton TORCHINDUCTOR_CACHE_DIR=$C/inductor \
        timeout ${PER_RUN_S:-150} python3 bench/warm_jobs_probe.py $case coil 2>&1 \
        | grep "first_call_s\|pool_started\|jobs_sent\|Error" | cut -c1-600
    done
  done
done
[ -n "${CASES_BENCH:-}" ] && CASES=$CASES_BENCH bash bench/gpu_session12d.sh
