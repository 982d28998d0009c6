#!/usr/bin/env bash
# coil's benchmarks on the GPU machine: `coil bench` over the chosen suites, from the root of a
# copy of the tree that carries coil's wheels in .whl/ (bench/README.md: how to build and carry
# them, and the device call).
#
#   bash bench/gpu_bench.sh [SUITE|CASE ...] [-- COIL_BENCH_ARG ...]
#
# SUITE: micro (the default: the 16 micro cases), infer (the five bf16 inference cases), train
# (the five AMP training steps), models (infer and train), all (micro and models); or any name
# `coil bench --list` shows: a case (resnet50_train_amp), a model (gpt2: its two cases) or a micro
# base name (softmax: bf16 and fp32).
# The micro cases chosen run in one `coil bench` call (timed in interleaved rounds); every model
# case runs in a `coil bench` call of its own, at most CASE_S seconds (default 300), so one case
# that does not finish costs only itself. Arguments after `--` go to every call, e.g.
# `-- --warm-runs 1` (fewer warm-start processes, to fit the training cases into one device call),
# `-- --modes eager,coil`, `-- --rounds 3`, `-- --precompile`.
#
# Writes under $OUT (default bench-out): micro/ and <case>/ with the harness's bench.json and
# bench.md, and <name>.log with everything a call printed; prints the versions, then each call's
# bench.md (the table and the targets it checks). Exit status: 1 if any call failed.
set -u
source bench/device_env.sh

suites=()
extra=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
  suites+=("$1"); shift
done
[ ${#suites[@]} -gt 0 ] || suites=(micro)

# every case coil bench knows (`coil bench --list`: one name a line)
all_cases=$(coil bench --list | grep -E '^[a-z0-9_]+$')
[ -n "$all_cases" ] || { echo "coil bench --list printed no cases"; exit 1; }
expand() {
  local c
  for c in $all_cases; do
    case "$1" in
      all) echo "$c" ;;
      micro) [[ $c == *_infer_* || $c == *_train_* ]] || echo "$c" ;;
      models) [[ $c == *_infer_* || $c == *_train_* ]] && echo "$c" ;;
      infer) [[ $c == *_infer_* ]] && echo "$c" ;;
      train) [[ $c == *_train_* ]] && echo "$c" ;;
      *) [[ $c == "$1" || $c == "$1"_* ]] && echo "$c" ;;
    esac
  done
  return 0
}

micro=()
models=()
for s in "${suites[@]}"; do
  found=$(expand "$s")
  [ -n "$found" ] || { echo "no coil bench case matches '$s' (coil bench --list)"; exit 1; }
  for c in $found; do
    if [[ $c == *_infer_* || $c == *_train_* ]]; then
      [[ " ${models[*]} " == *" $c "* ]] || models+=("$c")
    else
      [[ " ${micro[*]} " == *" $c "* ]] || micro+=("$c")
    fi
  done
done

status=0
bench() {  # bench NAME CASE...: one `coil bench` call into $OUT/NAME, its bench.md printed
  local name=$1
  shift
  echo "== coil bench $* ${extra[*]}"
  timeout "${CASE_S:-300}" coil bench "$@" --out "$OUT/$name" --budget-s 2000 ${extra[@]+"${extra[@]}"} \
    > "$OUT/$name.log" 2>&1 || { echo "   exit $? (log: $OUT/$name.log)"; tail -5 "$OUT/$name.log"; status=1; }
  [ -f "$OUT/$name/bench.md" ] && cat "$OUT/$name/bench.md"
}

[ ${#micro[@]} -eq 0 ] || bench micro "${micro[@]}"
for c in ${models[@]+"${models[@]}"}; do
  bench "$c" "$c"
done
exit $status
