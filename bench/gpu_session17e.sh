#!/usr/bin/env bash
# session 17: the runtime's GPU tests at this tree (the cross-stream replay test among them), the
# cross-stream test again with the runner's stream ordering switched off (it must fail then), and
# the GPU end-to-end tests of the tangents' pointer table and the recomputed parameter casts
set -u
source bench/device_env.sh
timeout ${RT_S:-200} python3 -m pytest -q -p no:cacheprovider -m gpu packages/runtime/tests 2>&1 | tail -3
echo "== without _after_last_replay (expected: failures)"
timeout 120 python3 - <<'PY' 2>&1 | tail -4
import sys, pytest
import coil.runtime.cudagraph as cg
cg._after_last_replay = lambda device: None
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-m", "gpu",
                      "packages/runtime/tests/test_gpu_indirect.py", "-k", "another_stream"]))
PY
timeout ${IT_S:-240} python3 -m pytest -q -p no:cacheprovider tests-integration/test_indirect_inputs.py \
  tests-integration/test_param_casts.py 2>&1 | tail -3
