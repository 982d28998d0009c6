#!/usr/bin/env bash
# session 6: coil alone on the AMP training steps with training CUDA graphs off
# (COIL_CUDA_GRAPHS_TRAINING=0): time, cold compile, reserved and allocated warm peaks
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
COIL_CUDA_GRAPHS_TRAINING=0 timeout 400 python3 -m coil.backend.cli bench gpt2_train_amp resnet50_train_amp --modes coil --out $OUT/off --budget-s 900 2>&1 | grep "done in"
python3 -c "
import json,sys; r=json.load(open('$OUT/off/bench.json'))
for n,c in r['cases'].items():
    d=c.get('coil',{}); print('off', n, {k: d.get(k) for k in ('ms','first_call_s','warm_first_call_s','peak_mib','peak_allocated_mib','accuracy_ok','error')})
"
