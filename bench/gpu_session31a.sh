#!/usr/bin/env bash
# session 31: (1) bench/sum_dim0_probe.py, bf16 (hand-written split sums over dim 0 of 16384 x 8192:
# chunks, tiles, warps, stages, program order; beside the copy, a plain read, coil and Inductor);
# (2) GPT-2's AMP training step with three warm processes per mode (CASES / WARM_RUNS / PER_CASE_S
# as bench/gpu_session30c.sh)
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout ${PROBE_S:-330} python3 bench/sum_dim0_probe.py ${PROBE_ARGS:-} 2>&1 | grep -v -i warn | tee $OUT/sum_dim0_probe.txt
[ -n "${CASES:-}" ] && bash bench/gpu_session30c.sh
exit 0
