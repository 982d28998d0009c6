#!/usr/bin/env bash
# session 4: what is live at ResNet-50 training's peak, Inductor vs coil (one process each)
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for mode in inductor coil; do
  timeout 200 python3 bench/peak_live_set.py resnet50_train_amp $mode > "$OUT/peak_$mode.txt" 2>&1
  grep -A12 "^== " "$OUT/peak_$mode.txt"
done
