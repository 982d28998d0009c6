#!/usr/bin/env bash
# (ran with wheels built from ff6a96c + bench/experiments/session14_late_inputs.patch)
# session 14, final code: the runtime's GPU tests, the end-to-end CUDA-graph tests on the GPU, the
# pool probe of GPT-2's coil step (where the graph pool grew: `growth`), then `coil bench` on
# CASES (eager, Inductor, coil: time, peak, accuracy).
set -u
source bench/device_env.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests -m gpu > $OUT/runtime_gpu.log 2>&1
tail -2 $OUT/runtime_gpu.log
timeout 150 python3 -m pytest -q -p no:cacheprovider tests-integration/test_cuda_graph_segments.py > $OUT/integration_cg.log 2>&1
tail -2 $OUT/integration_cg.log
rm -rf /tmp/coil-cache
timeout 150 python3 bench/graph_pool_probe.py gpt2_train_amp coil > $OUT/pool_gpt2.json 2> $OUT/pool_gpt2.err
python3 - $OUT/pool_gpt2.json <<'PY' || tail -3 $OUT/pool_gpt2.err
import json, sys
d = json.load(open(sys.argv[1]))
print(f"== gpt2 coil: peak {d['peak_mib']} MiB")
for p, v in d["pools"].items():
    print("  pool", p, json.dumps(v))
for p, v in d["growth"].items():
    for g in v:
        print("  grew", p, json.dumps(g))
PY
CASES=${CASES:-gpt2_train_amp} PER_CASE_S=${PER_CASE_S:-260} bash bench/gpu_session12d.sh
