#!/usr/bin/env bash
# session 19: `coil bench --precompile` on the inference cases whose warm start stayed above 25 %
# of the cold one (Dynamo's tracing): every mode's cold first-call process runs under torch's
# caching precompile and saves Dynamo's package, the warm one loads it. CASES (default: ResNet-50
# and ViT-B/16 inference, which torch can package, and GPT-2 inference, which torch 2.11 loads
# but re-traces: the decorated forward's guards look up its globals in the wrong module)
set -u
source bench/device_env.sh
timeout ${BENCH_S:-560} python3 -m coil.backend.cli bench --precompile --budget-s 2000 \
  --out /tmp/b19b ${CASES:-resnet50_infer_bf16 vit_b16_infer_bf16 gpt2_infer_bf16} > $OUT/bench.log 2>&1
echo "exit $?"
cp /tmp/b19b/bench.md /tmp/b19b/bench.json $OUT/ 2>/dev/null
sed -n '/^|/p;/geomean\|first call\|warm\|Dynamo\|accuracy/p' /tmp/b19b/bench.md | cut -c1-400
python3 - /tmp/b19b/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for n, r in d["cases"].items():
    for m in ("inductor", "coil"):
        x = r.get(m, {})
        print(n, m, "cold", x.get("first_call_s"), "warm", x.get("warm_first_call_s"),
              "dynamo cold", x.get("dynamo_cold"), "warm", x.get("dynamo_warm"), "acc", x.get("accuracy_ok"), "ms", x.get("ms"))
PY
grep -i "error\|Traceback" $OUT/bench.log | head -20
