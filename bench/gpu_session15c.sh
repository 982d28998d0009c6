#!/usr/bin/env bash
# session 15: GPT-2 AMP training's CUDA-graph pool with bench/graph_pool_probe.py: where its live
# peak is reached and the largest blocks live then (wrapper lines)
set -u
source bench/device_env.sh
rm -rf /tmp/coil-cache
timeout ${PROBE_S:-150} python3 bench/graph_pool_probe.py ${CASE:-gpt2_train_amp} coil > $OUT/pool.json 2> $OUT/pool.err
python3 - $OUT/pool.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(d["peak_mib"], d["pools"])
for k, v in d["at_peak"].items():
    print(k, v)
PY
