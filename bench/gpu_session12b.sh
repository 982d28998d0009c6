#!/usr/bin/env bash
# session 12: the runtime's GPU tests (expandable graph pool), the micro probe (MICRO; eviction
# hints), and the pool probe (CASES, coil) with the graph pool's segments expandable
set -u
source bench/device_env.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests -m gpu 2>&1 | tail -6
micro_probe
for c in ${CASES:-gpt2_train_amp bert_base_train_amp}; do
  for m in ${MODES:-coil}; do
    echo "== pool probe $c $m"
    timeout 240 python3 bench/graph_pool_probe.py $c $m > $OUT/pool_${c}_$m.json 2> $OUT/pool_${c}_$m.err
    python3 -c "
import json,sys; d=json.load(open(sys.argv[1]))
print(json.dumps({k: d[k] for k in ('peak_mib','peak_allocated_mib','first_call_s')}), json.dumps(d['pools']))
for p, sites in d['at_peak'].items(): print('  at peak of', p, sites[:8])
print('  live at end', d['live_at_end'][:12])" $OUT/pool_${c}_$m.json || tail -3 $OUT/pool_${c}_$m.err
  done
done
