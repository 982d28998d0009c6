#!/usr/bin/env bash
# session 10: `coil bench` over CASES, one invocation (and output folder) per case, then each
# mode's warm peak in its own process and in the shared one, and where coil's graphs came from
set -u
source bench/device_env.sh
for case in ${CASES:-gpt2_train_amp}; do
  timeout ${PER_CASE_S:-300} python3 -m coil.backend.cli bench $case --out $OUT/bench_$case --budget-s 2000 2>&1 | grep "done in" | cut -c1-200
  grep "^| $case" $OUT/bench_$case/bench.md 2>/dev/null | cut -c1-400
  python3 - $OUT/bench_$case/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for case, r in d["cases"].items():
    if not isinstance(r, dict) or "coil" not in r:
        continue
    for m in ("eager", "inductor", "coil"):
        x = r.get(m, {})
        sh = x.get("shared_process", {})
        pools = {k: round(v["reserved_mib"]) for k, v in x.get("after_call_by_pool", {}).items()}
        print(f"  {m}: own-process peak reserved {x.get('peak_mib')} allocated {x.get('peak_allocated_mib')} pools {pools};"
              f" shared-process {sh.get('peak_mib')} / {sh.get('peak_allocated_mib')}; caches {x.get('warm_graph_caches', '')}"[:600])
PY
done
grep -h "^| case\|^|---" $OUT/bench_*/bench.md 2>/dev/null | head -2
