#!/usr/bin/env bash
# session 20: `coil bench` of each case in CASES at this tree's code (bench/gpu_session12d.sh:
# rows and every mode's first calls, time, peak, accuracy printed), the bench folders tarred
# into $OUT. Run twice: the training steps of the transformers, then the rest.
set -u
REAL_OUT=${OUT:-out}
mkdir -p /tmp/bench20 "$REAL_OUT"
OUT=/tmp/bench20 bash bench/gpu_session12d.sh
tar czf "$REAL_OUT/bench_$(date +%H%M%S).tgz" -C /tmp bench20
