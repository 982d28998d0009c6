#!/usr/bin/env bash
# session 4: warm compile on the GPU (bench/compile_profile.py cold then warm, same cache folders,
# new process; prints the AOT-cache result per graph), the Llama-style training step with
# COIL_CUDA_GRAPHS_TRAINING off/on, and coil bench on GPT-2's and Llama's AMP training steps
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
C=/tmp/cp_cache; rm -rf $C; mkdir -p $C
for run in cold warm; do
  echo "== compile_profile bert_base_infer_bf16 $run"
  COIL_CACHE_DIR=$C/coil TRITON_CACHE_DIR=$C/triton TORCHINDUCTOR_CACHE_DIR=$C/inductor \
    timeout 120 python3 bench/compile_profile.py --case bert_base_infer_bf16 2>&1 | grep -v Warn | tail -16
done
timeout 150 python3 bench/cudagraph_train_timing.py --batch 4 --seq 512 2>&1 | grep -v '^\[transformers\]' | tail -8
timeout 330 python3 -m coil.backend.cli bench ${CASES:-gpt2_train_amp} --out $OUT/bench --budget-s 320 2>&1 | tail -2
head -12 $OUT/bench/bench.md
