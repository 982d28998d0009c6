#!/usr/bin/env bash
# session 25: with pointwise candidates in the tuner (512 / 4, 512 / 8 beside 1024 / 2) and the
# read-again alternative: the tuner's choices for the pointwise micro cases (bench/micro_probe.py),
# the micro suite with interleaved rounds, the autotuning integration tests on the GPU, then the
# ResNet-50 training step (big pointwise kernels, the max-pool backward among them) in `coil bench`
set -u
source bench/device_env.sh
MICRO="${MICRO:-pointwise_chain_fp32 pointwise_chain_bf16 bias_gelu_fp32 bias_gelu_bf16}" MICRO_S=240 micro_probe
MICRO_BENCH_S=${MICRO_BENCH_S:-300} micro_rounds $OUT/bench
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests-integration/test_autotune.py 2>&1 | tail -2
OUT=$OUT CASES="${CASES:-resnet50_train_amp}" PER_CASE_S=${PER_CASE_S:-200} bash bench/gpu_session12d.sh 2>&1 | grep -v "bytecode"
