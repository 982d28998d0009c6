#!/usr/bin/env bash
# Outer tiling and split reductions on the H200 (device tool; carry .whl built with
# `uv build --all-packages -o .whl`): bench/reduce_probe.py's cases (sum over dim 0/1 of
# 16384 x 8192 bf16/fp32; var_mean over (0, 2, 3) of [32, 256, 56, 56] bf16, NCHW and
# channels_last) for eager, Inductor and coil with coil's kernels and launches logged, then
# coil alone over the OUTER_RBLOCK x OUTER_WARPS grid on the strided cases.
set -u
OUT=${OUT:-out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/coil*.whl || exit 1
export PYTHONPATH=/tmp/site COIL_CACHE_DIR=/tmp/cc PYTHONUNBUFFERED=1
echo "== eager / inductor / coil (kernels and wrapper in $OUT/reduce_probe.log)"
COIL_LOGS=kernels,wrapper python3 bench/reduce_probe.py eager inductor coil > $OUT/reduce_probe.log 2>&1
grep -E "^(sum|var_mean)" $OUT/reduce_probe.log
echo "== coil tiling sweep"
python3 bench/reduce_probe.py --sweep coil 2>&1 | tee $OUT/reduce_sweep.log | grep -E "^(sum|var_mean)"
