#!/usr/bin/env bash
# session 25: the micro suite against Inductor with interleaved timing rounds (`coil bench micro
# --rounds 5`: every mode compiled first, then 5 rounds alternating the modes; coil compared with
# Inductor round by round), then what importing the Inductor modules torch's AOTAutograd cache key
# pulls in costs on this host (a process that has imported torch, Dynamo, transformers and coil)
set -u
source bench/device_env.sh
timeout ${MICRO_BENCH_S:-420} python3 -m coil.backend.cli bench micro --rounds ${ROUNDS:-5} --out $OUT/micro --budget-s 2000 2>&1 | grep -c "done in"
python3 - $OUT/micro/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for name, r in d["cases"].items():
    i, c, p = r["inductor"], r["coil"], r.get("coil_vs_inductor", {})
    print(f"  {name:22s} ind {i['ms']:.4f} coil {c['ms']:.4f} ratio {c['ms'] / i['ms']:.3f} "
          f"round ratios {' '.join(f'{x:.3f}' for x in p.get('ratios', []))} not slower {p.get('a_not_slower')}/{p.get('rounds')} "
          f"copy% {c['pct_copy']:.0f} acc {c['accuracy_ok']}/{i['accuracy_ok']}")
print(f"  copy GB/s {d['copy_gbs']}")
PY
grep -A3 "Issue-5 targets" $OUT/micro/bench.md
python3 - <<'PY'
import time
t = time.perf_counter(); import torch, torch._dynamo, transformers, coil.backend; t1 = time.perf_counter()
import torch._inductor.choices; t2 = time.perf_counter()
import torch._inductor.codegen.wrapper; t3 = time.perf_counter()
print(f"imports: torch+dynamo+transformers+coil {t1 - t:.2f} s, then torch._inductor.choices {t2 - t1:.2f} s, "
      f"torch._inductor.codegen.wrapper {t3 - t2:.2f} s")
PY
