#!/usr/bin/env bash
# session 21: (1) `coil bench micro` with this tree's wheels (e5da2b1's single NaN-propagating
# max reduction; micro_bench); (2) coil's warm first call of Llama-style training with fa32b0c's
# wheels (.whl_old) and this tree's (410d1d9: each kernel's Triton cache key reused from its
# marker), warm_ab.
set -u
source bench/device_env.sh
micro_bench $OUT/micro 2>&1 | tee $OUT/micro.txt
warm_ab ${WARM_CASES:-llama_style_train_amp} 2>&1 | tee $OUT/warm.txt
