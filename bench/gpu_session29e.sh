#!/usr/bin/env bash
# session 29: online variance (a looped layer norm's centred sum of squares in its mean's loop,
# triton-codegen online.py): coil's fp32 layer norm texts beside Inductor's Welford loop
# (bench/rownorm_variants_probe.py), then the layer-norm micro cases against Inductor
# (`coil bench ... --rounds 5`, tuned as the bench does); both logs under $OUT
set -u
NO_PYC=1 source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout ${ROW_S:-110} python3 bench/rownorm_variants_probe.py layernorm_fp32 --rounds 5 > $OUT/rownorm.log 2>&1
grep -v -i "warn" $OUT/rownorm.log | grep "^==\|^  " | cut -c1-110 | head -16
timeout ${MICRO_S:-90} python3 -m coil.backend.cli bench layernorm_fp32 layernorm_bf16 --rounds 5 --out $OUT/micro --budget-s 200 > $OUT/micro.log 2>&1
grep "^| layernorm\|behind\|>= Inductor" $OUT/micro/bench.md | cut -c1-200
