#!/usr/bin/env bash
# session 22: two more one-row loop alternatives for persistent rows (LOOPED_ALTERNATIVES +
# (4096, 32), (8192, 32)) on the micro cases within 1 % of Inductor. .whl_old: 11fc1bd.
set -u
source bench/device_env.sh
ROUNDS=1 MICRO_S=150 MICRO_LINES=200 micro_ab wide32 layernorm_fp32 softmax_fp32 rmsnorm_bf16 softmax_bf16 2>&1 \
  | grep "^==\|inductor\|coil\|chosen" | grep -v "^  *RBLOCK.*ms$" | tee $OUT/micro_ab.txt
