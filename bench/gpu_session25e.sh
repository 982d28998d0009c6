#!/usr/bin/env bash
# session 25: the read-again alternative of persistent kernels in the tuner. The tuner's choices
# for the norms (bench/micro_probe.py, COIL_LOGS=autotune), then the micro suite with interleaved
# rounds (`coil bench micro --rounds 5`), then the autotuning integration tests on the GPU
set -u
source bench/device_env.sh
MICRO="${MICRO:-layernorm_bf16 rmsnorm_bf16 softmax_fp32}" MICRO_S=240 micro_probe
MICRO_BENCH_S=${MICRO_BENCH_S:-300} micro_rounds $OUT/bench
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests-integration/test_autotune.py 2>&1 | tail -3
