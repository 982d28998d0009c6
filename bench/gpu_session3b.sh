#!/usr/bin/env bash
# session 3, second device call: the fast-launch probe and the host-time profile of Llama training
set -u
OUT=${OUT:-out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/coil*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/cc
python3 bench/fast_launch_probe.py 2>&1 | tail -40
python3 bench/host_profile.py llama_style_train_amp coil --top 40 2>&1 | grep -v "^\[transformers\]" > $OUT/host_coil.txt; head -70 $OUT/host_coil.txt
python3 bench/host_profile.py llama_style_train_amp inductor --top 25 2>&1 | grep -v "^\[transformers\]" > $OUT/host_ind.txt; head -3 $OUT/host_ind.txt
