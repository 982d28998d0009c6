# Sourced by the device scripts (bench/gpu_session8*.sh): coil's wheels from .whl installed into
# /tmp/site, the environment every run there uses, and $OUT made.
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
