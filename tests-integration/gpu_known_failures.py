"""End-to-end tests known to fail when the suite runs on a CUDA device, each with what was seen.

The suite's CI runs on the CPU (Triton's interpreter). Run whole on an H100 (session 15,
2026-11-27, torch 2.11.0+cu130, Triton 3.6.0, `bench/gpu_session15g.sh`), these failed; they are
marked xfail (not strict: a fix shows as XPASS) there by `conftest.py`, and not investigated yet.
With the marks the whole suite on the H100 gave 288 passed, 24 xfailed, 5 xpassed; the 5 were
round_decimals_and_angle cases under a key then too broad, narrowed since to the 7 that failed.
int -> bfloat16 (2 tests) was fixed after (triton-codegen casts.py) and passes on the H100.
Keys are test node ids without the file's folder; a key ending in `[` covers every parameter.
"""

from __future__ import annotations

_NO_ANGLE = "eager has no angle for half/bfloat16 on CUDA ('angle_cuda' not implemented): no oracle"

ON_CUDA: dict[str, str] = {
    "test_native_coverage_ieee.py::test_signbit_copysign_fmax_fmin_on_edge_values[":
        "on CUDA the sign of a zero result differs from eager's (signbit/copysign/fmax/fmin)",
    "test_native_coverage_ieee.py::test_round_decimals_and_angle[0-dtype2]": _NO_ANGLE,
    "test_native_coverage_ieee.py::test_round_decimals_and_angle[0-dtype3]": _NO_ANGLE,
    "test_native_coverage_ieee.py::test_round_decimals_and_angle[2-dtype2]": _NO_ANGLE,
    "test_native_coverage_ieee.py::test_round_decimals_and_angle[2-dtype3]": _NO_ANGLE,
    "test_native_coverage_ieee.py::test_round_decimals_and_angle[-2-dtype2]": _NO_ANGLE,
    "test_native_coverage_ieee.py::test_round_decimals_and_angle[-2-dtype3]": _NO_ANGLE,
    "test_native_coverage_ieee.py::test_round_decimals_and_angle[2-dtype0]":
        "on CUDA round(x, decimals=2) differs from eager's by up to 6.1e-05",
    "test_native_coverage_ieee.py::test_forward_and_backward_match_eager[dist]":
        "on CUDA the graph keeps an ATen fallback: aten.linalg_vector_norm",
    "test_native_coverage_ieee.py::test_forward_and_backward_match_eager[ldexp]":
        "on CUDA the graph keeps an ATen fallback: aten.pow.Scalar",
    "test_native_coverage_ieee.py::test_forward_and_backward_match_eager[narrow_copy_permute_copy]":
        "fails on CUDA (seen in session 15, not analysed)",
    "test_native_coverage_ieee.py::test_forward_and_backward_match_eager[native_group_norm_all_outputs]":
        "fails on CUDA (seen in session 15, not analysed)",
    "test_opinfo_regressions.py::test_one_hot_of_a_0d_tensor_keeps_its_range_check":
        "on CUDA no RuntimeError is raised for the out-of-range class, and a graph fails with "
        "'Expected Tensor but got None'",
    "test_opinfo_regressions.py::test_ifft_of_a_real_input":
        "on CUDA: RuntimeError 'Expected Tensor but got None'",
}

# CPU graphs run through Triton 3.6's interpreter when the suite runs on the device machine: a
# loop over a run-time int fails there with NumPy 2 (an upstream bug, fixed in Triton 3.9;
# packages/runtime/tests/test_cpu_kernels.py marks the same)
ON_TRITON_BEFORE_3_9: dict[str, str] = {
    "test_graph_cache.py::test_changed_knob_or_input_dtype_misses":
        "Triton < 3.9 interpreter: range() over a run-time int fails with NumPy 2",
    "test_graph_cache.py::test_dynamic_shape_graph_hits_and_serves_other_sizes":
        "Triton < 3.9 interpreter: range() over a run-time int fails with NumPy 2",
}


def reason_for(nodeid: str, *, cuda: bool, triton_before_3_9: bool) -> str | None:
    """Why the test `nodeid` (`file.py::name[params]`) is expected to fail here, or None."""
    tables = ([ON_CUDA] if cuda else []) + ([ON_TRITON_BEFORE_3_9] if triton_before_3_9 else [])
    for table in tables:
        for key, reason in table.items():
            if nodeid == key or (key.endswith("[") and nodeid.startswith(key)):
                return reason
    return None
