#!/usr/bin/env bash
# session 18: which op of the GPU sweep's first 41 float32 pairs (the order 18h's worker pool ran
# them) leaves the CUDA generator unusable (bench/rng_after_capture_probe.py, one process)
set -u
source bench/device_env.sh
COIL_OPINFO_DEVICE=cuda COIL_COMPILE_WORKERS=0 timeout ${PROBE_S:-300} python3 bench/rng_after_capture_probe.py \
  ${OPS:-item acosh clamp_min cauchy abs addmm.decomposed addbmm geometric baddbmm arange bmm uniform exponential \
  addmv log_normal add vdot addmm mv dot clamp_max allclose broadcast_to atan asinh asin broadcast_shapes acos \
  combinations cartesian_prod broadcast_tensors addcmul sub atanh addcdiv addr mul ceil cdist chunk positive} 2>&1 \
  | grep -v "^W1127\|Warning\|warn(" | cut -c1-400 | tail -60
