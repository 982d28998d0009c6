#!/usr/bin/env bash
# coil bench's distributed rows on the GPU machine (several GPUs: a device kind such as
# nvidia-h200-x2 or -x4), from the root of a copy of the tree that carries coil's wheels in .whl/
# (bench/README.md says how to build and carry them).
#
#   bash bench/gpu_distributed.sh NPROC RECIPE MODEL [-- BENCH_ARG ...]
#   e.g. bash bench/gpu_distributed.sh 2 ddp gpt2
#        bash bench/gpu_distributed.sh 4 fsdp2_tp llama_style -- --steps 10
#
# Runs `python3 -m torch.distributed.run --nproc-per-node NPROC -m coil.bench.distributed` (torchrun)
# once per mode (MODES, default
# "fp64 eager inductor inductor_ro coil coil_nocg": each mode in processes of its own, caches empty), rows in
# $OUT/distributed, then prints `python3 -m coil.bench.distributed --report` (also written to
# $OUT/distributed.md). MODE_S bounds each mode in seconds (default 540).
set -u
source bench/device_env.sh
nproc=$1 recipe=$2 model=$3
shift 3
[ "${1:-}" = "--" ] && shift
for mode in ${MODES:-fp64 eager inductor inductor_ro coil coil_nocg}; do
  echo "== $recipe $model $mode on $nproc GPUs"
  root=$(mktemp -d)
  COIL_CACHE_DIR=$root/coil TRITON_CACHE_DIR=$root/triton TORCHINDUCTOR_CACHE_DIR=$root/inductor \
    timeout "${MODE_S:-540}" python3 -m torch.distributed.run --nproc-per-node "$nproc" -m coil.bench.distributed \
    --recipe "$recipe" \
    --model "$model" --mode "$mode" --out "$OUT/distributed" "$@" > "$OUT/distributed-$recipe-$model-$mode.log" 2>&1 \
    || { echo "   exit $? (log: $OUT/distributed-$recipe-$model-$mode.log)"; tail -5 "$OUT/distributed-$recipe-$model-$mode.log"; }
done
python3 -m coil.bench.distributed --report "$OUT/distributed" | tee "$OUT/distributed.md"
