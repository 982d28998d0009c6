#!/usr/bin/env bash
# session 9: which part of GPT-2's AOTAutograd cache entry does not pickle (warm starts miss),
# then bench/gpu_session9a.sh's cold/warm compile profiles (CASES), autotuning split in parts
set -u
source bench/device_env.sh
timeout 150 python3 bench/aot_pickle_probe.py ${PROBE:-gpt2_train_amp} 2>&1 | grep -v Warn | grep '\[probe\]\|^    ' | head -40 | cut -c1-400
bash bench/gpu_session9a.sh
