#!/usr/bin/env bash
# session 16: the runtime's GPU tests (the pointer-table runner among them), Inductor's and
# coil's Llama-style AMP training pools side by side (bench/graph_pool_probe.py; json tarred,
# sizes of the largest blocks live at each pool's peak printed), then `coil bench CASE`
set -u
source bench/device_env.sh
if [ -z "${NO_RT:-}" ]; then
  timeout ${RT_S:-120} python3 -m pytest -q -p no:cacheprovider -m gpu packages/runtime/tests > $OUT/rt.log 2>&1
  tail -2 $OUT/rt.log
fi
mkdir -p /tmp/probe
for mode in ${PROBES-inductor coil}; do
  rm -rf /tmp/coil-cache /tmp/inductor-cache
  TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache timeout ${PROBE_S:-170} \
    python3 bench/graph_pool_probe.py ${PROBE_CASE:-llama_style_train_amp} $mode > /tmp/probe/$mode.json 2> /tmp/probe/$mode.err
  python3 - /tmp/probe/$mode.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(d["mode"], d["peak_mib"], {k: (v["reserved_mib"], v["live_peak_mib"]) for k, v in d["pools"].items()})
for k, v in d["at_peak"].items():
    if k.endswith("largest"):
        print(" ", k, sorted((round(n) for _, n in v), reverse=True))
PY
done
[ -n "${PROBES-x}" ] && tar czf $OUT/probe.tgz -C /tmp probe
for c in ${CASES:-llama_style_train_amp}; do
  timeout ${BENCH_S:-420} python3 -m coil.backend.cli bench $c --out $OUT/bench_$c --budget-s 2000 2>&1 | grep "done in" | cut -c1-120
  grep "^| [a-z]" $OUT/bench_$c/bench.md 2>/dev/null | cut -c1-400
done
