#!/usr/bin/env bash
# session 13 (not run to the end: the device time ran out): the GPU failure seen by gpu_session13c.sh
# with bench/experiments/session13_static_sizes.patch, that test with the wheels of main (.whl_old)
# and of main with the patch (.whl), then the rest of the end-to-end suite (.whl)
set -u
source bench/device_env.sh
old_wheels || exit 1
T=tests-integration/test_channels_last.py::test_conv_bn_relu_conv_inference_channels_last
for v in old new; do
  site=/tmp/site; [ $v = old ] && site=/tmp/site_old
  echo "== $v"
  COIL_CACHE_DIR=/tmp/cc_$v PYTHONPATH=$site timeout 120 python3 -m pytest -q -p no:cacheprovider $T > $OUT/one_$v.log 2>&1
  grep -E "^E |passed|failed" $OUT/one_$v.log | head -12
done
# the log lands in $OUT as it goes: a call cut short still brings back what ran
timeout ${INTEGRATION_S:-330} python3 -m pytest -q -p no:cacheprovider tests-integration --deselect $T > $OUT/rest.log 2>&1
grep -E "passed|failed|FAILED|^E " $OUT/rest.log | tail -15
