#!/usr/bin/env bash
# session 4: localise the bf16 stem gradient error (conv -> bn -> relu -> maxpool, channels-last)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
S=bench/stem_grad_probe.py
for args in "--layout cl" "--layout cl --drop pool" "--layout cl --drop relu" "--layout cl --drop relu,pool"; do
  python3 $S $args 2>&1 | grep -v Warn | tail -4
done
COIL_FUSION=0 python3 $S --layout cl 2>&1 | grep -v Warn | tail -4
COIL_DEBUG_DIR=$OUT/stem python3 $S --layout cl 2>&1 | grep -v Warn | tail -1
cd $OUT && tar czf stem.tgz stem && rm -rf stem
