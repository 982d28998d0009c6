#!/usr/bin/env bash
# session 11: `coil bench` per case with cold and warm first calls each in a new process, timed
# from torch.compile on (bench_models.first_call), bytecode cached (bench/device_env.sh)
set -u
source bench/device_env.sh
for case in ${CASES:-bert_base_train_amp}; do
  timeout ${PER_CASE_S:-300} python3 -m coil.backend.cli bench $case --out $OUT/bench_$case --budget-s 2000 2>&1 | grep "done in" | cut -c1-120
  grep "^| $case" $OUT/bench_$case/bench.md 2>/dev/null | cut -c1-400
  python3 - $OUT/bench_$case/bench.json $case <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["cases"].get(sys.argv[2], {})
for m in ("eager", "inductor", "coil"):
    x = r.get(m, {})
    st = [g.get("stage_s") for g in x.get("warm_graph_caches", [])]
    print(f"  {m}: cold {x.get('first_call_s')} warm {x.get('warm_first_call_s')} in-process {x.get('in_process_first_call_s')}"
          f" ms {x.get('ms')} peak {x.get('peak_mib')} acc {x.get('accuracy_ok')} err {str(x.get('error'))[:200]} warm stages {st}")
PY
done
micro_probe
