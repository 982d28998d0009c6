#!/usr/bin/env bash
# session 25: coil's kernel variants beside Inductor's own kernel text, both launched directly, and
# the GPU kernel time per call under torch.profiler of Inductor, coil and coil's kernel alone
# (bench/kernel_variants_probe.py: loads issued first, 4 warps, no mask; the layer norm's reread)
set -u
source bench/device_env.sh
timeout ${PROBE_S:-400} python3 bench/kernel_variants_probe.py ${CASES:-} --rounds ${ROUNDS:-5} 2>&1 | grep -v -i warn | tee $OUT/kernel_variants.txt
