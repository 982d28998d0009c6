#!/usr/bin/env bash
# session 20: `coil bench` of the five inference cases as 20d, each case's lines also in
# $OUT/log.txt as they come (a call that runs past its limit keeps what finished). With
# AB=1 first Llama-style training's warm peak in `coil bench --modes coil` again, session 19's
# wheels (.whl_old) and this tree's (.whl) (20e: 2714 / 2774 MiB; 20f's graph_pool_probe: 2714
# both); the first call with it ran past the device's 600 s and returned nothing.
set -u
source bench/device_env.sh
[ -n "${AB:-}" ] && { old_wheels || echo "no .whl_old"; }
for site in ${AB:+/tmp/site /tmp/site_old}; do
  s=$(basename $site)
  PYTHONPATH=$site COIL_CACHE_DIR=/tmp/cc-20g-$s timeout ${AB_S:-100} python3 -m coil.backend.cli bench \
    llama_style_train_amp --modes coil --out /tmp/b20g-$s --budget-s 2000 > /dev/null 2>&1
  python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['cases']['llama_style_train_amp']['coil']; print(sys.argv[2], c.get('ms'), c.get('peak_mib'), c.get('peak_allocated_mib'))" /tmp/b20g-$s/bench.json $s
done
CASES=${CASES:-gpt2_infer_bf16 bert_base_infer_bf16 llama_style_infer_bf16 resnet50_infer_bf16 vit_b16_infer_bf16} \
  PER_CASE_S=${PER_CASE_S:-100} bash bench/gpu_session20d.sh 2>&1 | tee $OUT/log.txt
