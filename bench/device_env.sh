# Sourced by bench/gpu_bench.sh and bench/gpu_tests.sh on the GPU machine, from the root of a copy
# of the tree that carries coil's wheels in .whl/ (README.md in this folder says how to make them).
#
# - installs the wheels into /tmp/site (the machine's own environment stays as it is; the wheels
#   are pure Python) unless the same wheels are there already (scripts started side by side, one
#   a GPU, share one install: none replaces files another imports), and puts /tmp/site first on
#   PYTHONPATH and /tmp/site/bin (the `coil` console script) first on PATH;
# - COIL_CACHE_DIR=/tmp/coil-cache, unbuffered output, and $OUT (default bench-out) made;
# - prints the GPU, Python, torch, Triton and transformers versions (the first lines of every log);
# - bytecode: the machine sets PYTHONDONTWRITEBYTECODE=1 and its site packages carry no .pyc
#   files, so every process would compile the source of each module it imports (~3 ms a module,
#   hundreds of modules in a warm first call), which an installed environment never does. Python
#   here writes and reads bytecode under /tmp/pycache instead, compiled for every package once
#   per machine before anything is measured. NO_PYC=1 keeps the machine's setting.
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
wheels=$(cat .whl/*.whl | sha256sum)
if [ "$(cat /tmp/site/.coil-wheels 2>/dev/null)" != "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || { echo "installing .whl/*.whl failed"; exit 1; }
  echo "$wheels" > /tmp/site/.coil-wheels
  rm -f /tmp/pycache/.site-done
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1 COIL_CACHE_DIR=${COIL_CACHE_DIR:-/tmp/coil-cache}
if [ -z "${NO_PYC:-}" ]; then
  unset PYTHONDONTWRITEBYTECODE
  export PYTHONPYCACHEPREFIX=/tmp/pycache
  if [ ! -e /tmp/pycache/.done ]; then
    python3 -m compileall -q -j 0 $(python3 -c "import site, sysconfig; print(sysconfig.get_paths()['stdlib'], *site.getsitepackages())") /tmp/site > /dev/null 2>&1
    mkdir -p /tmp/pycache && touch /tmp/pycache/.done
  elif [ ! -e /tmp/pycache/.site-done ]; then
    python3 -m compileall -q -j 0 /tmp/site > /dev/null 2>&1  # the wheels are new
  fi
  touch /tmp/pycache/.site-done
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
python3 - <<'PY'
import platform

import torch
import triton

try:
    import transformers
    hf = transformers.__version__
except ImportError:
    hf = "absent"
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
print(f"{gpu}; Python {platform.python_version()}, torch {torch.__version__}, Triton {triton.__version__}, "
      f"transformers {hf}")
PY
