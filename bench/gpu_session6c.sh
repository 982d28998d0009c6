#!/usr/bin/env bash
# session 6: coil alone on the AMP training steps after COIL_AUTOTUNE_MIN_BYTES (cold compile),
# with training CUDA graphs on (default) and, for GPT-2, off: reserved and allocated warm peaks
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
timeout 330 python3 -m coil.backend.cli bench resnet50_train_amp gpt2_train_amp --modes coil --out $OUT/on --budget-s 320 2>&1 | grep "done in"
COIL_CUDA_GRAPHS_TRAINING=0 timeout 200 python3 -m coil.backend.cli bench gpt2_train_amp --modes coil --out $OUT/off --budget-s 190 2>&1 | grep "done in"
for d in on off; do python3 -c "
import json,sys; r=json.load(open('$OUT/$d/bench.json'))
for n,c in r['cases'].items():
    d=c.get('coil',{}); print('$d', n, {k: d.get(k) for k in ('ms','first_call_s','warm_first_call_s','peak_mib','peak_allocated_mib','accuracy_ok','error')})
"; done
