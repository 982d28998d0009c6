#!/usr/bin/env bash
# session 11: coil's warm child (bench_models CASE coil) with compile workers (default) and
# without (COIL_COMPILE_WORKERS=0: every cached kernel loads on this process's threads), on the
# caches a `coil bench` run left (ENV_<case>="K=V ..." from its bench.json's warm_cache_env)
set -u
source bench/device_env.sh
for case in ${CASES:-resnet50_train_amp bert_base_train_amp}; do
  var=ENV_$case; env_kv=${!var}
  for w in default 0 default 0; do
    echo -n "$case workers=$w: "
    if [ $w = default ]; then wk=""; else wk="COIL_COMPILE_WORKERS=0"; fi
    env $env_kv $wk python3 -m coil.backend.bench_models $case coil 2>&1 | grep "first_call_s\|graph_caches" | tr '\n' ' ' | cut -c1-400; echo
  done
done
