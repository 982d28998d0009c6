#!/usr/bin/env bash
# session 4: what is live at ResNet-50 training's peak (Inductor vs coil), and where coil's
# bn1.bias gradient error comes from (eager NCHW / eager channels-last / coil variants)
set -u
OUT=${OUT:-out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for mode in inductor coil; do
  timeout 170 python3 bench/peak_live_set.py resnet50_train_amp $mode 2>&1 | grep -v Warning | tail -45
done
timeout 200 python3 bench/grad_error_probe.py resnet50_train_amp --seeds 2 --names 'bn1\.|^loss' 2>&1 | tail -40
COIL_CHANNELS_LAST=0 timeout 120 python3 bench/grad_error_probe.py resnet50_train_amp --seeds 1 --names 'bn1\.|^loss' 2>&1 | tail -20
