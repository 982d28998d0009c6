#!/usr/bin/env bash
# session 23: ResNet-50 training's step time varies by process (9.8 to 13 ms with the same
# wheels and caches in 23b). N processes of bench/profile_model.py --only coil on the same cache
# folder: each one's wall time, kernel count, GPU busy time and top kernels, to see which kernels
# differ between a fast and a slow process
set -u
source bench/device_env.sh
export COIL_CACHE_DIR=/tmp/cc-prof
for i in $(seq ${N:-4}); do
  timeout ${TIME_S:-120} python3 bench/profile_model.py $OUT/prof$i ${CASE:-resnet50_train_amp} --only coil --top ${TOP:-25} 2>&1 \
    | grep -v -i warn | grep "===\|ms \|first call" | cut -c1-150
done
