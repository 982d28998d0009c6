#!/usr/bin/env bash
# session 20: Llama-style training's warm peak with session 19's wheels (.whl_old) and this
# tree's (.whl), `coil bench --modes coil` each (20d measured 2774 MiB against session 17's
# 2714); then `coil bench gpt2_train_amp` (20d's run of it ran past its 190 s limit).
set -u
source bench/device_env.sh
old_wheels || echo "no .whl_old"
for site in /tmp/site_old /tmp/site; do
  s=$(basename $site)
  PYTHONPATH=$site COIL_CACHE_DIR=/tmp/cc-20e-$s timeout ${AB_S:-150} python3 -m coil.backend.cli bench \
    llama_style_train_amp --modes coil --out /tmp/b20e-$s --budget-s 2000 2>&1 | grep "done in" | cut -c1-100
  echo "$s: $(grep '^| llama' /tmp/b20e-$s/bench.md | cut -c1-250)"
done
CASES=gpt2_train_amp PER_CASE_S=${PER_CASE_S:-330} bash bench/gpu_session20d.sh
