python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site
P="bfloat16 cl bnrelu"
COIL_DEBUG_DIR=$OUT/bad python3 bench/maxpool_grad_probe.py "$P" 2>&1 | grep bfloat
COIL_DEBUG_DIR=$OUT/good python3 bench/maxpool_grad_probe.py "bfloat16 nchw bnrelu" 2>&1 | grep bfloat
for v in COIL_FUSION=0 COIL_REDUCTION_STRATEGY=looped COIL_REDUCTION_STRATEGY=persistent COIL_SPLIT_REDUCTION_MIN=1000000000 COIL_DEBUG_ASSERTS=1 COIL_REUSE=0; do env $v python3 bench/maxpool_grad_probe.py "$P" 2>&1 | grep -E "bfloat|Error|error" | tail -3; done
cd $OUT && tar czf dbg.tgz bad good && rm -rf bad good
