#!/usr/bin/env bash
# session 12: cross-strategy autotuning on the micro cases coil trailed (MICRO), then where the
# training steps' reserved memory goes per pool (bench/graph_pool_probe.py, CASES x coil/inductor),
# then the same steps' warm peak with expandable segments (informational: a process-wide setting)
set -u
source bench/device_env.sh
micro_probe
for c in ${CASES:-gpt2_train_amp bert_base_train_amp}; do
  for m in coil inductor; do
    echo "== pool probe $c $m"
    timeout 240 python3 bench/graph_pool_probe.py $c $m > $OUT/pool_${c}_$m.json 2> $OUT/pool_${c}_$m.err
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: d[k] for k in ('peak_mib','peak_allocated_mib','first_call_s')}), json.dumps(d['pools'])); [print('   ', s) for s in d['step_alloc_sites_mib'][:8]]" $OUT/pool_${c}_$m.json || tail -3 $OUT/pool_${c}_$m.err
  done
done
for c in ${EXP_CASES:-gpt2_train_amp}; do
  for m in coil inductor; do
    echo -n "== expandable segments $c $m: "
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 200 python3 -m coil.backend.bench_models $c $m 2>&1 | grep "warm_peak" | cut -c1-200
  done
done
