#!/usr/bin/env bash
# session 25: with pointwise candidates in the tuner (512 / 4, 512 / 8 beside 1024 / 2) and the
# read-again alternative: the tuner's choices for the pointwise micro cases (bench/micro_probe.py),
# the micro suite with interleaved rounds, the autotuning integration tests on the GPU, then the
# ResNet-50 training step (big pointwise kernels, the max-pool backward among them) in `coil bench`
set -u
source bench/device_env.sh
MICRO="${MICRO:-pointwise_chain_fp32 pointwise_chain_bf16 bias_gelu_fp32 bias_gelu_bf16}" MICRO_S=240 micro_probe
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
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests-integration/test_autotune.py 2>&1 | tail -2
OUT=$OUT CASES="${CASES:-resnet50_train_amp}" PER_CASE_S=${PER_CASE_S:-200} bash bench/gpu_session12d.sh 2>&1 | grep -v "bytecode"
