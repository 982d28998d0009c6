"""End-to-end tests known to fail when the suite runs on a CUDA device, each with what was seen.

The suite's CI runs on the CPU (Triton's interpreter). Run whole on an H100 (session 15,
2026-11-27, torch 2.11.0+cu130, Triton 3.6.0, `bench/gpu_session15g.sh`), 24 failed and were
listed here. Session 18 (`bench/gpu_session18a.sh`, `18b.sh`) found their causes and the list is
empty: most were torch 2.11 or Triton 3.6, not CUDA (reproduced on the CPU with those versions):
Triton 3.6 negates a float as 0 - x (-(0.0) was +0.0; triton-codegen now multiplies by -1), a
float32 `/` on CUDA is div.full.f32 (round(x, decimals) 1 ulp off; value op "div_rn"), torch 2.11
keeps linalg_vector_norm whole and differentiates ldexp with an integer pow (both lowered now),
eager's group norm in torch 2.11 reads a strided weight as contiguous and has no derivative of
narrow_copy (the oracle, not coil: the tests say so), eager has no CUDA angle for half types (the
CPU's is the oracle there), eager's CUDA one_hot has no host-side range check (the check is
tested on the CPU), and record_stream failed on an fft's conjugate output (runtime cudagraph.py).
Keys are test node ids without the file's folder; a key ending in `[` covers every parameter.
"""

from __future__ import annotations

ON_CUDA: dict[str, str] = {}

# Tests known to fail where Triton is older than 3.9 (its interpreter runs the CPU graphs). Empty
# since session 18: a loop over a run-time int failed there with NumPy 2 (an upstream bug), and
# coil's interpreted kernels now convert the bound themselves (triton-codegen `_coil_index`).
ON_TRITON_BEFORE_3_9: dict[str, str] = {}


def reason_for(nodeid: str, *, cuda: bool, triton_before_3_9: bool) -> str | None:
    """Why the test `nodeid` (`file.py::name[params]`) is expected to fail here, or None."""
    tables = ([ON_CUDA] if cuda else []) + ([ON_TRITON_BEFORE_3_9] if triton_before_3_9 else [])
    for table in tables:
        for key, reason in table.items():
            if nodeid == key or (key.endswith("[") and nodeid.startswith(key)):
                return reason
    return None
