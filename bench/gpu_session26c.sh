#!/usr/bin/env bash
# session 26: the AOT-cache and lazy-table tests on the GPU (torch 2.11: the cold process reads the
# table through AOTAutograd, the warm one must not build it), then `coil bench --precompile` of
# ResNet-50 inference (three warm processes per mode)
set -u
source bench/device_env.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider tests-integration/test_aot_cache.py meta/tests/test_lazy_table.py 2>&1 | tail -3
case=${CASE:-resnet50_infer_bf16}
timeout ${PER_CASE_S:-300} python3 -m coil.backend.cli bench $case --precompile --out $OUT/bench_pc_$case --budget-s 2000 2>&1 | grep "done in" | cut -c1-120
grep "^| [a-z]\|^- warm\|^- coil.s warm\|^- Dynamo" $OUT/bench_pc_$case/bench.md 2>/dev/null | grep -v "^| case" | cut -c1-330
