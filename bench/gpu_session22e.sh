#!/usr/bin/env bash
# session 22: `coil bench micro` (all 16 cases beside Inductor) with this tree's wheels (77f231e:
# online softmax, one-row loop candidates); per case Inductor's and coil's ms and coil's % of copy
set -u
source bench/device_env.sh
MICRO_BENCH_S=${MICRO_BENCH_S:-280} micro_bench $OUT/micro 2>&1 | tee $OUT/micro.txt
