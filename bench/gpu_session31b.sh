#!/usr/bin/env bash
# session 31: after the outer-reduction changes (OUTER_RBLOCK 8, short strided rows "outer",
# outer splits within SPLIT_TARGET_PROGRAMS): (1) `coil bench` of the sum-over-dim-0 micro
# cases, Inductor and coil, ROUNDS rounds; (2) ResNet-50's AMP training step
# (bench/train_step_time.py) with .whl_old (HEAD before the changes) and .whl, alternating
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout ${MICRO_S:-75} python3 -m coil.backend.cli bench sum_dim0_bf16 sum_dim0_fp32 --modes inductor,coil \
  --rounds ${ROUNDS_MICRO:-3} --out $OUT/micro --budget-s 2000 > $OUT/micro.log 2>&1
grep "^| [a-z]" $OUT/micro/bench.md 2>/dev/null | cut -c1-260
python3 - $OUT/micro/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("copy GB/s", d.get("copy_gbs"))
for name, r in d["cases"].items():
    i, c, p = r["inductor"], r["coil"], r.get("coil_vs_inductor", {})
    print(f"  {name:16s} ind {i['ms']:.4f} coil {c['ms']:.4f} ratios {p.get('ratios')} coil GB/s {c.get('gbs'):.0f} pct {c.get('pct_copy'):.1f} ind pct {i.get('pct_copy'):.1f}")
PY
TIME_S=${TIME_S:-110} ROUNDS=1 train_ab resnet50_train_amp
exit 0
