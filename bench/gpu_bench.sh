#!/usr/bin/env bash
# coil's benchmarks on the GPU machine: `coil bench` (python -m coil.bench) over the chosen
# suites, from the root of a copy of the tree that carries coil's wheels in .whl/ (bench/README.md:
# how to build and carry them, and the device call).
#
#   bash bench/gpu_bench.sh [SUITE|CASE ...] [-- COIL_BENCH_ARG ...]
#
# SUITE: micro (the default: the 16 micro cases), gemm (the GEMM cases: eager, Inductor, coil and
# Inductor max-autotune), attention (the attention cases: eager, Inductor, coil and FlexAttention),
# infer (the five hand-picked models' bf16 inference), train (their AMP training steps), models
# (both), zoo (every zoo case: inference, training, gradient accumulation, training with AdamW), zoo-decoder,
# zoo-encoder, zoo-encdec, zoo-vision, all; or any name `python -m coil.bench --list NAME`
# accepts: a case, a model (gpt2, zoo_llama, llama), a family (gpt-neox), a micro op (softmax),
# an attention form (attn_causal), NAME:infer, NAME:train, NAME:accum or NAME:opt for one step kind.
#
# The micro, gemm and attention cases run in one call (timed in interleaved rounds), the model
# cases in another, each model case in a process of its own that is stopped after CASE_S seconds (default 300; the modes
# it finished keep their figures). On a machine of several GPUs the model cases are dealt out to
# one `coil bench` a GPU (LANES, default: every GPU; each case still alone on its GPU, the CPUs
# shared; a lane times its steps only while no other lane compiles or times: --lane-lock,
# coil.bench.lanes) and their reports merged into one. The whole script keeps within TOTAL_S seconds (default 540,
# inside one 10-minute device call): a case that would not fit is skipped and listed at the end
# with the command that runs what is left. Arguments after `--` go to every call, e.g.
# `-- --quick` (no first-call processes: one compile a mode), `-- --warm-runs 0` (cold
# first calls only), `-- --modes eager,coil,inductor_ro`, `-- --rounds 3`, `-- --precompile`.
#
# Writes under $OUT (default bench-out): micro/ (the micro, gemm and attention cases) and models/
# with the harness's bench.json and bench.md, and micro.log, models.log with everything a call printed; prints the versions, then
# each call's bench.md (tables, pairs, targets). Exit status: 1 if any call failed.
set -u
start=$SECONDS
source bench/device_env.sh

suites=()
extra=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
  case "$1" in
    infer) suites+=(models:infer) ;;
    train) suites+=(models:train) ;;
    *) suites+=("$1") ;;
  esac
  shift
done
[ ${#suites[@]} -gt 0 ] || suites=(micro)

# the cases the suites select, one a line, in run order
cases=$(python3 -m coil.bench --list "${suites[@]}") || { echo "no coil bench case matches: ${suites[*]}"; exit 1; }
micro=()
models=()
for c in $cases; do
  if [[ $c == *_infer_bf16 || $c == *_train_amp || $c == *_train_accum || $c == *_train_opt ]]; then models+=("$c"); else micro+=("$c"); fi
done

status=0
bench() {  # bench NAME BUDGET_S ARG...: one `python -m coil.bench` call into $OUT/NAME, its bench.md printed
  local name=$1 budget=$2
  shift 2
  echo "== coil bench $* ${extra[*]}"
  timeout $((budget + 60)) python3 -m coil.bench "$@" --out "$OUT/$name" --budget-s "$budget" \
    ${extra[@]+"${extra[@]}"} > "$OUT/$name.log" 2>&1 || { echo "   exit $? (log: $OUT/$name.log)"; tail -5 "$OUT/$name.log"; status=1; }
  [ -f "$OUT/$name/bench.md" ] && cat "$OUT/$name/bench.md"
}

left_over() {  # left_over BENCH_JSON CASE...: the cases the budget left out or cut short, as the command that runs them
  python3 - "$1" "${extra[*]}" "${@:2}" <<'PY'
import json, sys
path, extra, wanted = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    cases = json.load(open(path))["cases"]
except (OSError, ValueError):
    cases = {}
left = [n for n in wanted if n not in cases or "time budget" in str(cases[n].get("skipped", ""))]
cut = [n for n in wanted if n in cases and any("time budget" in str(r.get("error", "")) for r in cases[n].values()
                                               if isinstance(r, dict))]
if cut:
    print(f"cut short by the case budget (CASE_S): {' '.join(cut)}")
if left:
    print(f"not run (time budget): {len(left)} cases; next: bash bench/gpu_bench.sh {' '.join(left)}"
          + (f" -- {extra}" if extra else ""))
PY
}

total=${TOTAL_S:-540}
if [ ${#micro[@]} -gt 0 ]; then
  bench micro $((total - (SECONDS - start))) "${micro[@]}"
  left_over "$OUT/micro/bench.json" "${micro[@]}"
fi
if [ ${#models[@]} -gt 0 ]; then
  left=$((total - (SECONDS - start)))
  lanes=${LANES:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
  [ "$lanes" -ge 1 ] 2>/dev/null || lanes=1
  [ "$lanes" -le ${#models[@]} ] || lanes=${#models[@]}
  if [ "$lanes" -eq 1 ]; then
    bench models "$left" "${models[@]}" --case-budget-s "${CASE_S:-300}"
  else
    # one `coil bench` a GPU over every lanes-th case, then one report of them all
    echo "== coil bench over $lanes GPUs in parallel: ${models[*]} ${extra[*]}"
    rm -rf "$OUT/lanes" && mkdir -p "$OUT/lanes"
    for ((g = 0; g < lanes; g++)); do
      mine=()
      for ((i = g; i < ${#models[@]}; i += lanes)); do mine+=("${models[$i]}"); done
      CUDA_VISIBLE_DEVICES=$g timeout $((left + 60)) python3 -m coil.bench "${mine[@]}" --out "$OUT/lanes/$g" \
        --budget-s "$left" --case-budget-s "${CASE_S:-300}" --lane-lock "$OUT/lanes/lock" \
        ${extra[@]+"${extra[@]}"} > "$OUT/lanes/$g.log" 2>&1 &
    done
    wait
    for ((g = 0; g < lanes; g++)); do echo "## GPU $g"; cat "$OUT/lanes/$g.log"; done > "$OUT/models.log"
    python3 -m coil.bench "${models[@]}" --merge $(for ((g = 0; g < lanes; g++)); do echo "$OUT/lanes/$g"; done) \
      --out "$OUT/models" || status=1
    rm -rf "$OUT/lanes"
  fi
  left_over "$OUT/models/bench.json" "${models[@]}"
fi
exit $status
