#!/usr/bin/env bash
# session 28: the micro suite against Inductor on the machine this call gets (an H200 was lent
# this session), interleaved timing rounds (`coil bench micro --rounds 5`, bench/device_env.sh
# micro_rounds)
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
MICRO_BENCH_S=${MICRO_BENCH_S:-400} micro_rounds $OUT/micro
