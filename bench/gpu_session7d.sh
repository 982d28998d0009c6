#!/usr/bin/env bash
# session 7: `coil bench` model cases (eager, Inductor, coil in one process; CASES), preceded by
# the GPU test files named in TESTS, each in its own process
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
for t in ${TESTS:-}; do
  echo "== $t"; timeout ${TEST_S:-120} python3 -m pytest -q -p no:cacheprovider --tb=line $t 2>&1 | grep -v "^DEBUG" | tail -3 | cut -c1-300
done
timeout ${BENCH_S:-480} python3 -m coil.backend.cli bench ${CASES} --out $OUT/bench --budget-s 2000 2>&1 | grep "done in" | cut -c1-200
cat $OUT/bench/bench.md 2>/dev/null | grep -v "^$" | head -30
