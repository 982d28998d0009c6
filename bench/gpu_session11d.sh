#!/usr/bin/env bash
# session 11: Python bytecode on the device machine and its share of a warm start. The site
# packages there come without .pyc files; if Python cannot write them, every process compiles
# the source of each module it imports. Warm first calls of coil (the bench's warm child and
# bench/compile_profile.py) and Inductor, without and with PYTHONPYCACHEPREFIX (a writable
# bytecode cache, as a pip-installed environment has)
set -u
export NO_PYC=${NO_PYC-1}  # the machine's own setting first (device_env.sh caches bytecode otherwise)
source bench/device_env.sh
python3 - <<'PY'
import os, sys, torch, transformers
print("dont_write_bytecode", sys.dont_write_bytecode, "PYTHONDONTWRITEBYTECODE", os.environ.get("PYTHONDONTWRITEBYTECODE"))
for m in (torch, transformers):
    d = os.path.dirname(m.__file__)
    print(m.__name__, d, "writable", os.access(d, os.W_OK), "pycache", os.path.isdir(os.path.join(d, "__pycache__")))
PY
case=${CASE:-bert_base_train_amp}
D=/tmp/w_$case; rm -rf $D; mkdir -p $D
export COIL_CACHE_DIR=$D/coil TRITON_CACHE_DIR=$D/triton TORCHINDUCTOR_CACHE_DIR=$D/inductor
python3 bench/compile_profile.py --case $case 2>&1 | grep "first call"
python3 -m coil.backend.bench_models $case inductor 2>&1 | grep first_call
for prefix in "" /tmp/pycache /tmp/pycache /tmp/pycache; do
  echo "== PYTHONPYCACHEPREFIX=$prefix"
  for m in coil inductor; do
    echo -n "  child $m: "; PYTHONPYCACHEPREFIX=$prefix python3 -m coil.backend.bench_models $case $m 2>&1 | grep first_call
  done
  echo -n "  compile_profile coil: "; PYTHONPYCACHEPREFIX=$prefix python3 bench/compile_profile.py --case $case 2>&1 | grep "first call"
done
du -sh /tmp/pycache 2>/dev/null
micro_probe
