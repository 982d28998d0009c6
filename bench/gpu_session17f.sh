#!/usr/bin/env bash
# session 17: Inductor's and coil's kernels for the micro cases where coil trails by < 1 %
# (bench/micro_probe.py: times, Inductor's kept configs and sources, coil's debug dirs), tarred
# into $OUT/micro_probe.tgz
set -u
source bench/device_env.sh
REAL_OUT=$OUT
timeout ${MICRO_S:-300} python3 bench/micro_probe.py ${MICRO:-rmsnorm_bf16 layernorm_fp32 pointwise_chain_fp32} \
  --out /tmp/mp > /tmp/mp.log 2>&1
grep -v -i warn /tmp/mp.log | grep "^==\|^  \|Error" | cut -c1-300
cp /tmp/mp.log /tmp/mp/ 2>/dev/null
tar czf $REAL_OUT/micro_probe.tgz -C /tmp mp
