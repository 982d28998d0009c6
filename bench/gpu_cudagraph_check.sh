#!/usr/bin/env bash
# CUDA-graph segments and training CUDA graphs on a GPU (device tool): bash bench/gpu_cudagraph_check.sh
# Build the wheels first (uv build --all-packages -o .whl) and carry .whl, as for bench/gpu_tests.sh.
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
# the GPU tests (captured segments, training replay, held outputs) and their CPU-path siblings
python3 -m pytest -q -p no:cacheprovider -rs tests-integration/test_cuda_graph_segments.py 2>&1 | tail -25 | tee "$OUT/cudagraph_tests.log"
# the runtime's own GPU tests (CudaGraphRunner unchanged behaviour)
python3 -m pytest -q -p no:cacheprovider packages/runtime/tests -m gpu 2>&1 | tail -5 | tee "$OUT/runtime_gpu.log"
# Llama-style training step, COIL_CUDA_GRAPHS_TRAINING off vs on: a small (launch-bound) and the bench batch
python3 bench/cudagraph_train_timing.py --batch 1 --seq 128 --json "$OUT/train_timing_small.json" 2>&1 \
    | grep -v '^\[transformers\]' | tail -6 | tee "$OUT/train_timing_small.log"
python3 bench/cudagraph_train_timing.py --batch 4 --seq 512 --json "$OUT/train_timing_bench.json" 2>&1 \
    | grep -v '^\[transformers\]' | tail -6 | tee "$OUT/train_timing_bench.log"
