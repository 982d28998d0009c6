#!/usr/bin/env bash
# session 27: where `coil bench`'s warm process loses ~1.3 s against compile_profile's
# (gpu_session27d.sh): one cold compile_profile run, then rounds of bench_models (as the bench
# runs it), bench/warm_entry_probe.py with and without --reset, and compile_profile, all warm
set -u
source bench/device_env.sh
case=${CASE:-gpt2_infer_bf16}
d=/tmp/w27e-$case; rm -rf $d
export COIL_CACHE_DIR=$d/coil TRITON_CACHE_DIR=$d/triton TORCHINDUCTOR_CACHE_DIR=$d/inductor
timeout 150 python3 bench/compile_profile.py --case $case 2>&1 | grep "first call"
for round in $(seq ${ROUNDS:-2}); do
  timeout 150 python3 -m coil.backend.bench_models $case coil 2>&1 | grep "first_call_s"
  timeout 150 python3 bench/warm_entry_probe.py $case 2>&1 | grep "first step"
  timeout 150 python3 bench/warm_entry_probe.py $case --reset 2>&1 | grep "first step"
  timeout 150 python3 bench/compile_profile.py --case $case 2>&1 | grep "first call"
done
# the modules the bench's warm process imports inside its clock, with their import times
if [ -n "${IMPORTS:-}" ]; then
  timeout 150 python3 -X importtime bench/warm_entry_probe.py $case --modules $OUT/warm-modules.txt 2> $OUT/warm-importtime.txt | grep "first step"
fi
