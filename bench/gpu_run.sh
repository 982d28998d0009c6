#!/usr/bin/env bash
# Everything coil checks on a GPU, in one call of the device tool (see docs/perf.md):
#   uv build --all-packages --wheel -o .whl && bash bench/gpu_run.sh
set -u
OUT=${OUT:-out}
mkdir -p "$OUT/cg"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
# the OpInfo sample runs CPU samples through the interpreter: CI covers it; Triton 3.6's interpreter
# cannot loop over run-time bounds with NumPy 2, so it is left out here
python3 -m pytest -q -p no:cacheprovider tests-integration --ignore=tests-integration/opinfo 2>&1 | tail -15 | tee "$OUT/integration.log"
python3 -m coil.backend.cli demo 2>&1 | grep -v '^\[transformers\]' | tee "$OUT/demo.log"
python3 bench/gpt2_e2e.py "$OUT" 2>&1 | grep -v '^\[transformers\]' | tail -12 | tee "$OUT/gpt2.log"
COIL_CUDA_GRAPHS=1 python3 bench/gpt2_e2e.py "$OUT/cg" 2>&1 | grep -v '^\[transformers\]' | tail -6 | tee "$OUT/gpt2_cg.log"
