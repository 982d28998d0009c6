#!/usr/bin/env bash
# session 3, final numbers for the training steps: `coil bench` on ResNet-50 and GPT-2 AMP steps
set -u
OUT=${OUT:-out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 560 python3 -m coil.backend.cli bench resnet50_train_amp gpt2_train_amp --out $OUT/train --budget-s 540 2>&1 | tail -3
cat $OUT/train/bench.md | head -12
