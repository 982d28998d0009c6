#!/usr/bin/env bash
# session 21: a looped max/min reduction's per-step combine as one NaN-propagating tl.maximum
# (max.NaN) instead of a select on the operands' NaN: bench/looped_max_probe.py (cross-entropy
# and softmax over 50257- and 32000-wide rows) with the previous commit's wheels (.whl_old) and
# this tree's, alternating, one round each (it ran the same loop inline, before probe_ab).
set -u
source bench/device_env.sh
probe_ab looped bench/looped_max_probe.py
