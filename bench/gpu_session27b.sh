#!/usr/bin/env bash
# session 27: the LM head split by columns (fx-passes pad_matmul_strides, inference weights that
# are graph inputs): its GPU tests, then step time and warm peak of GPT-2 and BERT inference with
# the old wheels (.whl_old, the commit before) and this tree's, alternating (train_ab)
set -u
source bench/device_env.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider tests-integration/test_lm_head_layout.py 2>&1 | tail -5
ROUNDS=${ROUNDS:-2} TIME_S=150 train_ab ${CASES:-gpt2_infer_bf16 bert_base_infer_bf16}
