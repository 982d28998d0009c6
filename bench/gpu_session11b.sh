#!/usr/bin/env bash
# session 11: why `coil bench`'s warm first call is slower than bench/compile_profile.py's
# (BERT training 7.5 vs 4.6 s): the bench per case (coil's warm child now reports its stage
# times), then the warm child again by hand, twice, on the caches the bench's cold run filled
set -u
source bench/device_env.sh
micro_probe
for case in ${CASES:-bert_base_train_amp}; do
  timeout ${PER_CASE_S:-300} python3 -m coil.backend.cli bench $case --out $OUT/bench_$case --budget-s 2000 2>&1 | grep "done in" | cut -c1-200
  grep "^| $case" $OUT/bench_$case/bench.md 2>/dev/null | cut -c1-400
  python3 - $OUT/bench_$case/bench.json $case > /tmp/again.sh <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["cases"][sys.argv[2]]
for m in ("inductor", "coil"):
    x = r.get(m, {})
    print(f"echo '  bench {m}: cold {x.get('first_call_s')} warm {x.get('warm_first_call_s')} {json.dumps(x.get('warm_graph_caches', ''))[:400]}'")
    env = " ".join(f"{k}={v}" for k, v in x.get("warm_cache_env", {}).items())
    for k in (1, 2):
        print(f"echo '  by hand {m} {k}:'; {env} timeout 200 python3 -m coil.backend.bench_models {sys.argv[2]} {m} | grep -v warm_peak | cut -c1-600")
PY
  bash /tmp/again.sh
done
