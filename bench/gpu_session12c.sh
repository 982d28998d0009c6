#!/usr/bin/env bash
# session 12: the pool probe (CASES x MODES) with the transient allocations no Python frame made
# and each CUDA-graph runner's inputs (static / borrowed / copied, MiB)
set -u
source bench/device_env.sh
for c in ${CASES:-bert_base_train_amp gpt2_train_amp}; do
  for m in ${MODES:-coil}; do
    echo "== pool probe $c $m"
    timeout 240 python3 bench/graph_pool_probe.py $c $m > $OUT/pool_${c}_$m.json 2> $OUT/pool_${c}_$m.err
    python3 -c "
import json,sys; d=json.load(open(sys.argv[1]))
print(json.dumps({k: d[k] for k in ('peak_mib','peak_allocated_mib','first_call_s')}))
print('  unattributed allocs in the step', d['step_unattributed_allocs_mib'])
for r in d['runners']: print('  runner', json.dumps(r))" $OUT/pool_${c}_$m.json || tail -3 $OUT/pool_${c}_$m.err
  done
done
