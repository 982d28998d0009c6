#!/usr/bin/env bash
# session 10: why coil's ResNet-50 training step ran uncaptured in the bench's shared process:
# run_model (bench/memory_probe.py) with coil.runtime's INFO log, with and without the modes before coil
set -u
source bench/device_env.sh
CASE=${CASE:-resnet50_train_amp}
for modes in coil inductor,coil eager,inductor,coil; do
  python3 -c "import logging, runpy, sys; logging.basicConfig(level=logging.WARNING); logging.getLogger('coil.runtime').setLevel(logging.INFO); sys.argv = ['memory_probe', '$CASE', '$modes']; runpy.run_path('bench/memory_probe.py', run_name='__main__')" > $OUT/$modes.jsonl 2> $OUT/$modes.err &
done
wait
for modes in coil inductor,coil eager,inductor,coil; do
  echo "=== $modes"; grep -v "^  warnings.warn\|UserWarning" $OUT/$modes.err | grep -i "coil\|error\|Traceback" | cut -c1-400 | sort | uniq -c | sort -rn | head -15
  grep summary $OUT/$modes.jsonl | cut -c1-700
done
