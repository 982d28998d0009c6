#!/usr/bin/env bash
# session 16: where Llama-style and BERT AMP training hold memory, coil against Inductor
# (bench/graph_pool_probe.py per case and mode: peak, pools, largest live blocks at each pool's
# live peak), with coil's wrappers dumped (COIL_DEBUG_DIR, tarred) to read the lines named
set -u
source bench/device_env.sh
for c in ${CASES:-llama_style_train_amp bert_base_train_amp}; do
  for mode in ${RUNS:-coil inductor}; do
    rm -rf /tmp/coil-cache /tmp/inductor-cache /tmp/dbg
    COIL_DEBUG_DIR=/tmp/dbg TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache timeout ${PROBE_S:-170} \
      python3 bench/graph_pool_probe.py $c $mode > $OUT/pool_${c}_${mode}.json 2> $OUT/pool_${c}_${mode}.err
    echo "== $c $mode"
    python3 - $OUT/pool_${c}_${mode}.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(d["peak_mib"], d["pools"])
for k, v in d["at_peak"].items():
    print(k, v[:14])
PY
    [ -d /tmp/dbg ] && tar czf $OUT/dbg_${c}_${mode}.tgz -C /tmp dbg
  done
done
