#!/usr/bin/env bash
# session 27: is `coil bench`'s warm process slower than bench/compile_profile.py's on the same
# machine and cache folders? GPT-2 inference: one cold compile_profile run, then two rounds of
# a warm compile_profile process and a warm `python -m coil.backend.bench_models CASE coil`
# process (the one `coil bench` starts), alternating
set -u
source bench/device_env.sh
case=${CASE:-gpt2_infer_bf16}
d=/tmp/w27d-$case; rm -rf $d
export COIL_CACHE_DIR=$d/coil TRITON_CACHE_DIR=$d/triton TORCHINDUCTOR_CACHE_DIR=$d/inductor
echo "== cold (compile_profile)"
timeout 150 python3 bench/compile_profile.py --case $case 2>&1 | grep "first call"
for round in 1 2; do
  echo "== warm $round compile_profile"
  timeout 150 python3 bench/compile_profile.py --case $case 2>&1 | grep "first call\|Dynamo\|AOTAutograd"
  echo "== warm $round bench_models"
  timeout 150 python3 -m coil.backend.bench_models $case coil 2>&1 | grep "first_call_s\|dynamo="
done
