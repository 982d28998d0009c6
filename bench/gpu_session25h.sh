#!/usr/bin/env bash
# session 25: after lowering the tuner's switch margin to 0.3 %: the Triton miscompile repro at the
# new pointwise candidates' configurations (bench/triton_miscompile/check.py), the tuner's choices
# for the two pointwise chains (bench/micro_probe.py), and the micro suite with interleaved rounds
set -u
source bench/device_env.sh
timeout 60 python3 bench/triton_miscompile/check.py 2>&1 | grep -v -i warn | tail -12
MICRO="${MICRO:-pointwise_chain_fp32 pointwise_chain_bf16}" MICRO_S=120 micro_probe
MICRO_BENCH_S=${MICRO_BENCH_S:-300} micro_rounds $OUT/bench
