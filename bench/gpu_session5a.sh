#!/usr/bin/env bash
# session 5: where ResNet-50's and GPT-2's AMP training steps spend GPU time (Inductor vs coil,
# kernel by kernel, coil's debug folder for ResNet), and warm compiles through the AOT cache now
# that entries with CUDA constants can be pickled (cold then warm, same cache folders)
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 200 python3 bench/profile_model.py $OUT/prof resnet50_train_amp --top 50 --debug-dir 2>&1 | grep -v Warn | tail -120
timeout 150 python3 bench/profile_model.py $OUT/prof gpt2_train_amp --top 30 2>&1 | grep -v Warn | tail -70
for case in gpt2_train_amp resnet50_train_amp; do
  C=/tmp/cp_$case; rm -rf $C; mkdir -p $C
  for run in cold warm; do
    echo "== compile_profile $case $run"
    COIL_CACHE_DIR=$C/coil TRITON_CACHE_DIR=$C/triton TORCHINDUCTOR_CACHE_DIR=$C/inductor \
      timeout 100 python3 bench/compile_profile.py --case $case 2>&1 | grep -v Warn | tail -18
  done
done
