#!/usr/bin/env bash
# session 10: coil alone on CASES, runner warm-ups in the ordinary pool (COIL_WARMUP_POOL=0) and in
# a pool of their own (=1: an experiment in cudagraph.py, measured no better and not kept; in this
# tree both runs are the same), the processes in parallel (memory statistics are per process)
set -u
source bench/device_env.sh
for case in ${CASES:-gpt2_train_amp bert_base_train_amp}; do
  for wp in 0 1; do
    COIL_WARMUP_POOL=$wp timeout ${PER_RUN_S:-400} python3 bench/memory_probe.py $case ${MODES:-coil} > $OUT/wp${wp}_$case.jsonl 2> $OUT/wp${wp}_$case.err &
  done
done
wait
python3 bench/memory_probe.py --print $OUT/*.jsonl
