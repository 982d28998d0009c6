#!/usr/bin/env bash
# session 19: the epilogue-first fusion order (scheduler/fusion.py: a reduction's per-row
# epilogue is tried first, candidates resolved to their current groups). cross_entropy's
# per-row loss term (the target logit's gather) moves into the row kernel; bench/micro_probe.py
# on both cross-entropy cases with this tree's wheels (.whl) and the last session's (.whl_old),
# alternating, two rounds; then `coil bench micro` (all 16, accuracy included) with this tree's
set -u
source bench/device_env.sh
micro_ab 19a cross_entropy_bf16 cross_entropy_fp32
micro_bench /tmp/b19a/micro
