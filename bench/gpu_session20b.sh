#!/usr/bin/env bash
# session 20, wheels built with bench/experiments/session20_row_gather.patch applied (not
# landed): 20a's change plus KernelWriter.from_row (a per-row gather of an element of a row the
# persistent kernel holds is read from registers: a max over the row's bits where the lane is the
# gathered column). bench/micro_probe.py on both cross-entropy cases with those wheels (.whl) and
# session 19's (.whl_old), alternating, two rounds; then `coil bench micro` (all 16 cases beside
# Inductor, accuracy included) with the patched wheels.
set -u
source bench/device_env.sh
micro_ab 20b cross_entropy_bf16 cross_entropy_fp32
micro_bench /tmp/b20b/micro
