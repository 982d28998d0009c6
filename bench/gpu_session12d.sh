#!/usr/bin/env bash
# session 12: `coil bench` per entry of CASES (a case name or "micro"), each its own bench
# invocation; prints each table row and, for model cases, every mode's first calls, time, peak
# and accuracy (bench/device_env.sh: bytecode cached)
set -u
source bench/device_env.sh
for case in ${CASES:-gpt2_train_amp}; do
  timeout ${PER_CASE_S:-300} python3 -m coil.backend.cli bench $case --out $OUT/bench_$case --budget-s 2000 2>&1 | grep "done in" | cut -c1-120
  grep "^| [a-z]" $OUT/bench_$case/bench.md 2>/dev/null | grep -v "^| case" | cut -c1-330
  grep "^- warm\|^- coil.s warm\|^- Dynamo" $OUT/bench_$case/bench.md 2>/dev/null | cut -c1-400
  python3 - $OUT/bench_$case/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for name, r in d["cases"].items():
    if r.get("kind") != "model":
        continue
    for m in ("eager", "inductor", "coil"):
        x = r.get(m, {})
        print(f"  {name} {m}: cold {x.get('first_call_s')} warm {x.get('warm_first_call_s')} {x.get('warm_first_call_runs_s')} ms {x.get('ms')}"
              f" peak {x.get('peak_mib')} alloc {x.get('peak_allocated_mib')} acc {x.get('accuracy_ok')} err {str(x.get('error'))[:160]}")
PY
done
