#!/usr/bin/env bash
# session 21: a looped max/min reduction's per-step combine as one NaN-propagating tl.maximum
# (max.NaN) instead of a select on the operands' NaN: bench/looped_max_probe.py (cross-entropy
# and softmax over 50257- and 32000-wide rows) with the previous commit's wheels (.whl_old) and
# this tree's, alternating, one round each.
set -u
source bench/device_env.sh
old_wheels || echo "no .whl_old"
for site in /tmp/site_old /tmp/site; do
  echo "== $(basename $site)"
  PYTHONPATH=$site COIL_CACHE_DIR=/tmp/cc-21d-$(basename $site) timeout ${PROBE_S:-120} \
    python3 bench/looped_max_probe.py 2>&1 | grep -v -i warn
done 2>&1 | tee $OUT/looped.txt
