#!/usr/bin/env bash
# session 18: cross_entropy_bf16 timed 0.155 ms in `coil bench micro` (18c) against 0.126 in
# session 17: bench/micro_probe.py of MICRO with this tree's wheels (.whl) and session 17's last
# (.whl_old), alternating, two rounds, each its own cache folders; coil's autotune log and timings
set -u
source bench/device_env.sh
old_wheels || echo "no .whl_old"
for round in 1 2; do
  for site in /tmp/site_old /tmp/site; do
    echo "== round $round $(basename $site)"
    PYTHONPATH=$site COIL_CACHE_DIR=/tmp/cc18d_$(basename $site)_$round timeout ${MICRO_S:-150} \
      python3 bench/micro_probe.py ${MICRO:-cross_entropy_bf16} --out /tmp/mp18d_$(basename $site)_$round 2>&1 \
      | grep -v -i warn | grep "^==\|^  \|Error\|autotune\|ms" | cut -c1-260 | head -40
  done
done
tar czf $OUT/mp18d.tgz -C /tmp $(cd /tmp && ls -d mp18d_*)
