#!/usr/bin/env bash
# session 3, first device call: bisect the sum-over-dim-0 regression (64b6278 vs HEAD) and
# break down training peak memory (bench/memory_breakdown.py) for GPT-2 and ResNet-50.
set -u
OUT=${OUT:-out}
pip_t() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$1" "${@:2}"; }
pip_t /tmp/site .whl/coil*.whl || exit 1
pip_t /tmp/site_old .whl_old/coil*.whl || exit 1
export PYTHONUNBUFFERED=1
echo "== old (64b6278)"; PYTHONPATH=/tmp/site_old COIL_CACHE_DIR=/tmp/cc_old COIL_LOGS=kernels python3 bench/reduce_probe.py coil 2>&1 | tee $OUT/old.log | grep -E "^sum|def |tl.load|# kernel|grid|XBLOCK =|num_warps" | head -40
export PYTHONPATH=/tmp/site COIL_CACHE_DIR=/tmp/cc
echo "== new"; COIL_LOGS=kernels,wrapper python3 bench/reduce_probe.py eager inductor coil 2>&1 | tee $OUT/new.log | grep -E "^sum|def |tl.load|# kernel|grid|XBLOCK|num_warps|cuda graph" | head -60
echo "== new, no cuda graphs"; COIL_CUDA_GRAPHS=0 python3 bench/reduce_probe.py coil 2>&1 | grep "^sum"
echo "== new, no fast launch"; COIL_FAST_LAUNCH=0 COIL_CUDA_GRAPHS=0 python3 bench/reduce_probe.py coil 2>&1 | grep "^sum"
for c in gpt2_train_amp resnet50_train_amp; do
  python3 bench/memory_breakdown.py $c eager inductor coil 2>&1 | grep -v "^\[transformers\]" | tail -120 | tee $OUT/mem_$c.log
done
