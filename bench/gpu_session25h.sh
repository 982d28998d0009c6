#!/usr/bin/env bash
# session 25: after lowering the tuner's switch margin to 0.3 %: the Triton miscompile repro at the
# new pointwise candidates' configurations (bench/triton_miscompile/check.py), the tuner's choices
# for the two pointwise chains (bench/micro_probe.py), and the micro suite with interleaved rounds
set -u
source bench/device_env.sh
timeout 60 python3 bench/triton_miscompile/check.py 2>&1 | grep -v -i warn | tail -12
MICRO="${MICRO:-pointwise_chain_fp32 pointwise_chain_bf16}" MICRO_S=120 micro_probe
timeout ${MICRO_BENCH_S:-300} python3 -m coil.backend.cli bench micro --rounds ${ROUNDS:-5} --out $OUT/bench --budget-s 2000 2>&1 | grep -c "done in"
python3 - $OUT/bench/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for name, r in d["cases"].items():
    i, c, p = r["inductor"], r["coil"], r.get("coil_vs_inductor", {})
    print(f"  {name:22s} ind {i['ms']:.4f} coil {c['ms']:.4f} ratio {c['ms'] / i['ms']:.3f} "
          f"round ratios {' '.join(f'{x:.3f}' for x in p.get('ratios', []))} not slower {p.get('a_not_slower')}/{p.get('rounds')} "
          f"copy% {c['pct_copy']:.0f} acc {c['accuracy_ok']}/{i['accuracy_ok']}")
print(f"  copy GB/s {d['copy_gbs']}")
PY
grep -A3 "Issue-5 targets" $OUT/bench/bench.md
