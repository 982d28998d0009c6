#!/usr/bin/env bash
# session 10: where coil's warm peak goes in `coil bench`'s shared process (bench/memory_probe.py)
# against the same case with fewer modes, without autotuning, and alone (train_graph_memory.py)
set -u
source bench/device_env.sh
CASE=${CASE:-gpt2_train_amp}
run() { tag=$1; shift; echo "== $tag"; timeout ${PER_RUN_S:-200} "$@" > $OUT/$tag.jsonl 2> $OUT/$tag.err; echo "rc=$?";
  python3 - $OUT/$tag.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    if "summary" in d:
        print(json.dumps(d["summary"], default=str)[:900]); continue
    print(d["mode"], "peak", d["peak_mib"], "alloc", d["peak_allocated_mib"])
    for pool, h in d["holders"].items():
        r = d["by_pool"].get(pool, {})
        print("  pool", pool, "reserved", round(r.get("reserved_mib", 0), 1), "live", h["live_mib"], "pinned free", h["pinned_free_mib"])
        for site, mib in h["top"][:8]:
            print("     ", mib, site[:150])
PY
}
run coil_only python3 bench/memory_probe.py $CASE coil
run coil_only_noautotune env COIL_AUTOTUNE=0 python3 bench/memory_probe.py $CASE coil
run ind_coil python3 bench/memory_probe.py $CASE inductor,coil
