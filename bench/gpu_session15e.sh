#!/usr/bin/env bash
# session 15: after pad_mm pads a weight computed in the graph in place (W and its padded copy one
# buffer): the end-to-end tests that touch padding and scatters, then GPT-2 and BERT AMP training's
# own-process warm peak for coil and Inductor, then `coil bench gpt2_train_amp` (time, accuracy)
set -u
source bench/device_env.sh
timeout ${TESTS_S:-200} python3 -m pytest -q -p no:cacheprovider tests-integration/test_inplace_scatter.py \
  tests-integration/test_models.py > $OUT/tests.log 2>&1
grep -E "passed|failed|FAILED|^E " $OUT/tests.log | tail -8
for c in ${CASES:-gpt2_train_amp bert_base_train_amp}; do
  for mode in ${RUNS:-coil inductor}; do
    rm -rf /tmp/coil-cache /tmp/inductor-cache
    TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache timeout ${PER_RUN_S:-150} \
      python3 -m coil.backend.bench_models $c $mode > $OUT/peak_${c}_${mode}.log 2>&1
    echo "$c $mode: $(grep -E '^(first_call_s|warm_peak)=' $OUT/peak_${c}_${mode}.log | tr '\n' ' ' | cut -c1-330)"
  done
done
rm -rf /tmp/coil-cache
CASE=gpt2_train_amp timeout ${PROBE_S:-150} python3 bench/graph_pool_probe.py gpt2_train_amp coil > $OUT/pool.json 2> $OUT/pool.err
python3 - $OUT/pool.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(d["peak_mib"], d["pools"])
for k, v in d["at_peak"].items():
    if "(0, 1)" in k:
        print(k, v[:8])
for p, g in d["growth"].items():
    print(p, g[-3:])
PY
timeout ${BENCH_S:-300} python3 -m coil.backend.cli bench gpt2_train_amp --out $OUT/bench --budget-s 2000 2>&1 | grep "done in" | cut -c1-120
grep "^| [a-z]" $OUT/bench/bench.md 2>/dev/null | cut -c1-330
