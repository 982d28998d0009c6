#!/usr/bin/env bash
# session 13: A/B of the micro cases (bench/micro_probe.py: Inductor and coil side by side in one
# process) between the wheels in .whl_old and .whl (session 13: main, and main with
# bench/experiments/session13_static_sizes.patch), alternating builds per case, each build with
# its own coil cache folder
set -u
source bench/device_env.sh
old_wheels || exit 1
for c in ${MICRO:-layernorm_fp32}; do
  for v in old new; do
    site=/tmp/site; [ $v = old ] && site=/tmp/site_old
    echo -n "$c $v: "
    COIL_CACHE_DIR=/tmp/ab_$v/coil PYTHONPATH=$site timeout 120 python3 bench/micro_probe.py $c --out $OUT/$v > $OUT/${c}_$v.log 2>&1
    grep "ms:" $OUT/${c}_$v.log || tail -3 $OUT/${c}_$v.log
  done
done
