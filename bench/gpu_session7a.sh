#!/usr/bin/env bash
# session 7: where training memory goes with coil's training CUDA graphs on vs off vs Inductor
# (bench/train_graph_memory.py; one process per config; autotuning off to keep compiles short)
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache COIL_AUTOTUNE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for case in ${CASES:-resnet50_train_amp gpt2_train_amp}; do
  timeout ${PER_CASE_S:-270} python3 bench/train_graph_memory.py $case ${CONFIGS:-inductor coil_off coil_on} \
    | tee -a $OUT/train_graph_memory.jsonl
done
