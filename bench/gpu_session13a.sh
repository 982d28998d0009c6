#!/usr/bin/env bash
# session 13: the runtime's GPU tests, the pool probe of coil (CASES, with COIL_GRAPH_PIN_INPUTS
# per PINS; runners' inputs, peak), then `coil bench` per case (BENCH_CASES) with every mode's
# figures. Measured with bench/experiments/session13_pinned_inputs.patch applied (not on main).
set -u
source bench/device_env.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests -m gpu 2>&1 | tail -6
for c in ${CASES:-gpt2_train_amp}; do
  for pin in ${PINS:-1}; do
    echo "== pool probe $c coil COIL_GRAPH_PIN_INPUTS=$pin"
    COIL_GRAPH_PIN_INPUTS=$pin timeout 240 python3 bench/graph_pool_probe.py $c coil > $OUT/pool_${c}_$pin.json 2> $OUT/pool_${c}_$pin.err
    python3 -c "
import json,sys; d=json.load(open(sys.argv[1]))
print(json.dumps({k: d[k] for k in ('peak_mib','peak_allocated_mib','first_call_s')}), json.dumps(d['pools']))
for r in d['runners']: print('  runner', json.dumps(r)[:400])" $OUT/pool_${c}_$pin.json || tail -5 $OUT/pool_${c}_$pin.err
  done
done
[ -n "${BENCH_CASES:-}" ] && CASES="$BENCH_CASES" PER_CASE_S=${PER_CASE_S:-300} bash bench/gpu_session12d.sh
