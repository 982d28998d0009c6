#!/usr/bin/env bash
# session 3, final numbers: the micro suite and the ResNet-50 cases through `coil bench`
# (eager, Inductor, coil side by side; bench.md under $OUT/*), then the memory breakdown of the
# ResNet-50 training step with coil alone in its process.
set -u
OUT=${OUT:-out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 260 python3 -m coil.backend.cli bench micro --out $OUT/micro --budget-s 240 2>&1 | tail -3
cat $OUT/micro/bench.md | head -24
timeout 300 python3 -m coil.backend.cli bench resnet50 --out $OUT/resnet --budget-s 280 2>&1 | tail -3
cat $OUT/resnet/bench.md | head -8
