#!/usr/bin/env bash
# coil's tests on the GPU machine, from the root of a copy of the tree that carries coil's wheels
# in .whl/ (bench/README.md: how to build and carry them, and the device call).
#
#   bash bench/gpu_tests.sh                      # the runtime's GPU tests, the end-to-end suite, `coil demo`
#   bash bench/gpu_tests.sh PYTEST_ARG ...       # pytest over what is named, e.g.
#                                                #   tests-integration/test_reductions.py -k online
#   bash bench/gpu_tests.sh opinfo [SWEEP_ARG ...]   # the OpInfo sweep with samples made on CUDA
#
# The end-to-end suite (tests-integration) runs its CUDA paths when a GPU is present; the tests
# known to fail there are marked by tests-integration/gpu_known_failures.py. The OpInfo sweep
# (tests-integration/opinfo/README.md) defaults here to float32 and bfloat16, one sample per
# (op, dtype), 16 spawned workers, 90 s a pair, COIL_COMPILE_WORKERS=0 in each (the sweep's
# workers are the parallelism); its arguments replace those defaults one by one (argparse keeps
# the last), and its results go to $OUT/opinfo (sweep.jsonl and the summaries, written as it goes).
# Logs go to $OUT (default bench-out): runtime_gpu.log, integration.log (on a machine of several
# GPUs the suite's tests are dealt out to one pytest a GPU, integration-0.log, ..., the runtime's
# GPU tests running beside them, and then the tests marked two_gpus run with every GPU visible,
# two_gpus.log), demo.log, pytest.log, opinfo.log. TESTS_S bounds each pytest or sweep run in
# seconds (default 540; on two GPUs, where a lane takes 400-450 s, TESTS_S=500 leaves the
# two_gpus tests and the demo room inside one 10-minute device call).
# Exit status: that of the last run that failed, else 0.
set -u
source bench/device_env.sh
status=0
run() {  # run LOG CMD...: CMD with its output in $OUT/LOG, its summary lines printed
  local log=$1 rc=0
  shift
  echo "== $*"
  timeout "${TESTS_S:-540}" "$@" > "$OUT/$log" 2>&1 || rc=$?
  grep -E "passed|failed|xfailed|FAILED|^ERROR" "$OUT/$log" | tail -15
  if [ $rc -ne 0 ]; then
    status=$rc
    echo "   exit $rc (log: $OUT/$log; 124: TESTS_S ran out)"
    tail -5 "$OUT/$log"
  fi
}
pytest_q=(python3 -m pytest -q -p no:cacheprovider -rfEx)

if [ $# -eq 0 ]; then
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  if [ "$gpus" -le 1 ]; then
    run runtime_gpu.log "${pytest_q[@]}" packages/runtime/tests -m gpu
    run integration.log "${pytest_q[@]}" tests-integration
  else  # the suite's tests dealt out round-robin (a heavy file's cases spread), one pytest a GPU;
    # the runtime's GPU tests beside them on the last GPU, so that nothing runs before the lanes
    ( CUDA_VISIBLE_DEVICES=$((gpus - 1)) run runtime_gpu.log "${pytest_q[@]}" packages/runtime/tests -m gpu
      exit $status ) > "$OUT/runtime.txt" &
    pids=($!)
    mapfile -t tests < <(python3 -m pytest -q -p no:cacheprovider --collect-only -m "not two_gpus" \
      tests-integration 2>/dev/null | grep '::')
    for ((lane = 0; lane < gpus; lane++)); do
      mine=()
      for ((i = lane; i < ${#tests[@]}; i += gpus)); do mine+=("${tests[$i]}"); done
      ( CUDA_VISIBLE_DEVICES=$lane run integration-$lane.log "${pytest_q[@]}" "${mine[@]}"
        exit $status ) > "$OUT/lane-$lane.txt" &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
    cat "$OUT"/runtime.txt "$OUT"/lane-*.txt
    run two_gpus.log "${pytest_q[@]}" -m two_gpus tests-integration  # every GPU visible
  fi
  echo "== coil demo"
  coil demo > "$OUT/demo.log" 2>&1 || { status=$?; echo "   exit $status"; }
  grep -v '^\[transformers\]' "$OUT/demo.log" | tail -20
elif [ "$1" = opinfo ]; then
  shift
  out=$(cd "$OUT" && pwd)/opinfo
  echo "== OpInfo sweep on CUDA $*"
  ( cd tests-integration && COIL_COMPILE_WORKERS=0 timeout "${TESTS_S:-540}" \
      python3 opinfo/sweep.py --device cuda --dtypes float32,bfloat16 --max-samples 1 --jobs 16 --timeout 90 \
      --out "$out" "$@" ) > "$OUT/opinfo.log" 2>&1 || { status=$?; echo "   exit $status (log: $OUT/opinfo.log)"; }
  [ -f "$out/sweep.jsonl" ] && echo "   $(wc -l < "$out/sweep.jsonl") (op, dtype) pairs recorded"
  [ -f "$out/summary.md" ] && head -15 "$out/summary.md"
  tail -5 "$OUT/opinfo.log"
else
  run pytest.log "${pytest_q[@]}" "$@"
fi
exit $status
