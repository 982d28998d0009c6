#!/usr/bin/env bash
# session 18: cross_entropy_bf16 timed 0.155 ms in `coil bench micro` (18c) against 0.126 in
# session 17: bench/micro_probe.py of MICRO with this tree's wheels (.whl) and session 17's last
# (.whl_old), alternating, two rounds, each its own cache folders; coil's autotune log and timings
set -u
source bench/device_env.sh
micro_ab 18d ${MICRO:-cross_entropy_bf16}
tar czf $OUT/mp18d.tgz -C /tmp $(cd /tmp && ls -d mp-18d-*)
