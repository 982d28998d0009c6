#!/usr/bin/env bash
# session 22: the pointwise micro cases (1.003-1.005 of Inductor in 22e) under wider blocks
# (bench/pointwise_warps_probe.py), and what Inductor keeps for them (bench/micro_probe.py)
set -u
source bench/device_env.sh
timeout 200 python3 bench/pointwise_warps_probe.py 1024/2 2048/2 2048/4 4096/4 4096/8 8192/8 2>&1 | grep -v -i warn | tee $OUT/pw.txt
timeout 120 python3 bench/micro_probe.py pointwise_chain_bf16 bias_gelu_fp32 --out $OUT/mp 2>&1 | grep "^==\|  inductor\|ms:" | cut -c1-250
