#!/usr/bin/env bash
# An A/B of two builds of coil on one `coil bench` case, on the GPU machine: the wheels in .whl/
# (this tree) against another build's wheels in OTHER (a git-ignored folder carried with the
# tree, e.g. .whl_other/; bench/README.md says how to build it), alternated over ROUNDS rounds
# (default 2), each run a `python3 -m coil.bench CASE --quick` process of its own on empty caches.
# A host-bound step moves by 20-30 % between processes, so only alternated runs compare builds.
#
#   bash bench/gpu_ab.sh OTHER CASE [-- COIL_BENCH_ARG ...]     (default: --modes coil)
#   e.g. bash bench/gpu_ab.sh .whl_other zoo_bart_train_amp
#
# Prints each run's rows of bench.md's table by mode ("other round 1: | CASE | coil | ms | loop
# ms | ..."); writes each run's bench.md and log under $OUT/ab/. CASE_S bounds a run in seconds
# (default 300). A/Bs run side by side (one a GPU, CUDA_VISIBLE_DEVICES) must share a lock file,
# LANE_LOCK=/tmp/ab.lock for each (coil.bench's --lane-lock: a run times its steps only while no
# other compiles or times); without it a host-bound step measured 18-32 ms in two runs of one
# build. Exit status: that of the last run that failed, else 0.
set -u
other=$1 case=$2
shift 2
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--modes coil)
source bench/device_env.sh
wheels=$(cat "$other"/*.whl | sha256sum)
if [ "$(cat /tmp/site_other/.coil-wheels 2>/dev/null)" != "$wheels" ]; then  # once per set: A/Bs side by side share it
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site_other "$other"/*.whl || { echo "installing $other/*.whl failed"; exit 1; }
  [ -n "${NO_PYC:-}" ] || python3 -m compileall -q -j 0 /tmp/site_other > /dev/null 2>&1
  echo "$wheels" > /tmp/site_other/.coil-wheels
fi
declare -A path=([this]=$PYTHONPATH [other]=/tmp/site_other${PYTHONPATH#/tmp/site})
mkdir -p "$OUT/ab"
status=0
for round in $(seq "${ROUNDS:-2}"); do
  for build in other this; do
    dir=$OUT/ab/$build-$round
    PYTHONPATH=${path[$build]} timeout "${CASE_S:-300}" python3 -m coil.bench "$case" --quick --out "$dir" \
      ${LANE_LOCK:+--lane-lock "$LANE_LOCK"} "${args[@]}" > "$dir.log" 2>&1 || { status=$?; echo "$build round $round: exit $status (log: $dir.log)"; }
    grep -E "^\| $case \| [a-z_]+ \|" "$dir/bench.md" 2>/dev/null | sed "s/^/$build round $round: /"
  done
done
exit $status
