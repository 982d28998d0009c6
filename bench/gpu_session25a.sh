#!/usr/bin/env bash
# session 25: the micro suite against Inductor with interleaved timing rounds (`coil bench micro
# --rounds 5`: every mode compiled first, then 5 rounds alternating the modes; coil compared with
# Inductor round by round), then what importing the Inductor modules torch's AOTAutograd cache key
# pulls in costs on this host (a process that has imported torch, Dynamo, transformers and coil)
set -u
source bench/device_env.sh
MICRO_BENCH_S=${MICRO_BENCH_S:-420} micro_rounds $OUT/micro
python3 - <<'PY'
import time
t = time.perf_counter(); import torch, torch._dynamo, transformers, coil.backend; t1 = time.perf_counter()
import torch._inductor.choices; t2 = time.perf_counter()
import torch._inductor.codegen.wrapper; t3 = time.perf_counter()
print(f"imports: torch+dynamo+transformers+coil {t1 - t:.2f} s, then torch._inductor.choices {t2 - t1:.2f} s, "
      f"torch._inductor.codegen.wrapper {t3 - t2:.2f} s")
PY
