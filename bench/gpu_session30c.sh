#!/usr/bin/env bash
# session 30: `coil bench` per entry of CASES (default: three AMP training steps), each its own
# invocation with --warm-runs WARM_RUNS (default 1: one warm process per mode, to fit the
# training cases in a device call); prints each table row and every mode's first calls, time,
# peak and accuracy (as bench/gpu_session12d.sh)
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
for case in ${CASES:-llama_style_train_amp resnet50_train_amp gpt2_train_amp}; do
  timeout ${PER_CASE_S:-185} python3 -m coil.backend.cli bench $case --warm-runs ${WARM_RUNS:-1} --out $OUT/bench_$case --budget-s 2000 2>&1 | grep "done in" | cut -c1-120
  grep "^| [a-z]" $OUT/bench_$case/bench.md 2>/dev/null | grep -v "^| case" | cut -c1-330
  python3 - $OUT/bench_$case/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for name, r in d["cases"].items():
    for m in ("eager", "inductor", "coil"):
        x = r.get(m, {})
        print(f"  {name} {m}: cold {x.get('first_call_s')} warm {x.get('warm_first_call_s')} {x.get('warm_first_call_runs_s')} ms {x.get('ms')}"
              f" peak {x.get('peak_mib')} alloc {x.get('peak_allocated_mib')} acc {x.get('accuracy_ok')} err {str(x.get('error'))[:160]}")
PY
done
