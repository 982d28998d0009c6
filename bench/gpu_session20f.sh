#!/usr/bin/env bash
# session 20: why Llama-style training's warm peak rose from 2714 to 2774 MiB with this
# session's fusion (20e): bench/graph_pool_probe.py (live and reserved bytes per pool) with
# session 19's wheels (.whl_old) and this tree's (.whl), JSON per wheel set in $OUT; then
# `coil bench` of CASES (default: the ResNet-50 and ViT training steps) as 20d.
set -u
source bench/device_env.sh
old_wheels || echo "no .whl_old"
for site in /tmp/site_old /tmp/site; do
  s=$(basename $site)
  PYTHONPATH=$site COIL_CACHE_DIR=/tmp/cc-20f-$s timeout ${PROBE_S:-150} python3 bench/graph_pool_probe.py \
    llama_style_train_amp coil > $OUT/pool_$s.json 2> $OUT/pool_$s.err
  python3 - $OUT/pool_$s.json $s <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], {k: v for k, v in d.items() if not isinstance(v, (list, dict))})
for name, p in (d.get("pools") or {}).items():
    print("  pool", name, {k: v for k, v in p.items() if not isinstance(v, (list, dict))})
PY
done
CASES=${CASES:-resnet50_train_amp vit_b16_train_amp} PER_CASE_S=${PER_CASE_S:-200} bash bench/gpu_session20d.sh
