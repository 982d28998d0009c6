#!/usr/bin/env bash
# session 10: ResNet-50 training after Inductor in one process (run_model, modes inductor,coil),
# coil.runtime at DEBUG: what the backward borrowed and why a replay was refused
set -u
source bench/device_env.sh
python3 -c "import logging, runpy, sys; logging.basicConfig(level=logging.WARNING); logging.getLogger('coil.runtime').setLevel(logging.DEBUG); sys.argv = ['memory_probe', 'resnet50_train_amp', 'inductor,coil']; runpy.run_path('bench/memory_probe.py', run_name='__main__')" > $OUT/ic.jsonl 2> $OUT/ic.err
grep "coil.runtime" $OUT/ic.err | grep -v "compile\|Compile" | cut -c1-3000 | head -20
grep summary $OUT/ic.jsonl | cut -c1-400
