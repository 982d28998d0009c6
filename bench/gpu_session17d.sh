#!/usr/bin/env bash
# session 17: `coil bench` of each case in CASES (bench/gpu_session12d.sh: rows and every mode's
# first calls, time, peak, accuracy printed), the bench folders tarred into $OUT/bench.tgz
set -u
REAL_OUT=${OUT:-out}
mkdir -p /tmp/bench17 "$REAL_OUT"
OUT=/tmp/bench17 bash bench/gpu_session12d.sh
tar czf "$REAL_OUT/bench_$(date +%H%M%S).tgz" -C /tmp bench17
