#!/usr/bin/env bash
# session 24: the bench's HF models under `out = model(ids)` with every output kept to the next
# call: do their CUDA graphs keep lazy clones on (bench/lazy_clone_probe.py)?
set -u
source bench/device_env.sh
timeout 300 python3 bench/lazy_clone_probe.py ${CASES:-gpt2_infer_bf16 llama_style_infer_bf16 bert_base_infer_bf16} 2>&1 \
  | grep -v -i warn | grep "infer_bf16\|Error\|error" | cut -c1-250
