#!/usr/bin/env bash
# session 25: variants of coil's persistent layer-norm kernel (no mask, the row read again for the
# normalisation, 8 warps) in interleaved rounds beside Inductor (bench/kernel_variants_probe.py),
# then Inductor's kept kernels and configurations for the pointwise cases coil trails
# (bench/micro_probe.py)
set -u
source bench/device_env.sh
timeout ${PROBE_S:-200} python3 bench/kernel_variants_probe.py ${CASES:-layernorm_bf16} --rounds ${ROUNDS:-5} 2>&1 | grep -v -i warn | tee $OUT/kernel_variants.txt
MICRO="${MICRO:-pointwise_chain_fp32 bias_gelu_fp32}" micro_probe
cp $OUT/micro/*_inductor.py $OUT/ 2>/dev/null; rm -rf $OUT/micro/*_coil
