#!/usr/bin/env bash
# session 10: bench/memory_probe.py on every training case, Inductor and coil, the cases in
# parallel processes (memory statistics are per process; the times printed are not comparable)
set -u
source bench/device_env.sh
for case in ${CASES:-gpt2_train_amp bert_base_train_amp llama_style_train_amp vit_b16_train_amp resnet50_train_amp}; do
  timeout ${PER_RUN_S:-500} python3 bench/memory_probe.py $case ${MODES:-inductor,coil} > $OUT/$case.jsonl 2> $OUT/$case.err &
done
wait
python3 bench/memory_probe.py --print $OUT/*.jsonl
