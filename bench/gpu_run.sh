#!/usr/bin/env bash
# Everything coil checks on a GPU, in one call of the device tool (see docs/perf.md):
#   bash bench/gpu_run.sh            (expects coil's wheels in .whl/, built by `uv build --all-packages -o .whl`)
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
python3 -m pytest -q -p no:cacheprovider tests-integration -x 2>&1 | tail -25 | tee "$OUT/integration.log"
python3 -m coil.backend.cli demo 2>&1 | grep -v '^\[transformers\]' | tee "$OUT/demo.log"
python3 bench/gpt2_e2e.py "$OUT" 2>&1 | grep -v '^\[transformers\]' | tail -40 | tee "$OUT/gpt2.log"
