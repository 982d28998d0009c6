"""End-to-end tests known to fail when the suite runs on a CUDA device, each with the reason.

The suite's CI runs on the CPU (Triton's interpreter); on the GPU machine it runs whole through
bench/gpu_tests.sh. A test that fails there for a reason that is not coil's to fix (eager has no
kernel or no derivative to compare with, an upstream bug of the installed torch or Triton) is
listed here with that reason and runs as a non-strict xfail; a failure that is coil's is fixed,
not listed. Tests whose oracle differs by device say so themselves (the CPU's eager where CUDA
eager has no half-type kernel, strict xfails where torch's trace has no check or derivative).
Keys are test node ids without the file's folder; a key ending in `[` covers every parameter,
one ending in `-` every parameter set it begins.
"""

from __future__ import annotations

ON_CUDA: dict[str, str] = {
    "test_dynamic_shapes.py::test_narrow_with_a_tensor_start": (
        "torch 2.11's Dynamo raises PendingUnbackedSymbolNotFound (u0 not in the returned outputs) "
        "while it traces narrow at a CUDA tensor's data-dependent start, before any backend runs"),
    "test_associative_scan.py::test_pointwise_scan_compiles_natively_and_trains[lifted-": (
        "torch 2.11's Dynamo refuses a pointwise associative_scan whose combine function closes over "
        "a tensor while its inputs require grad ('Associative_scan does currently not support "
        "gradients for lifted parameters!'), before any backend runs (the `plain` cases close over nothing)"),
}

# Tests known to fail where Triton is older than 3.9 (its interpreter runs the CPU graphs). Its
# interpreter cannot take a loop bound from a run-time int under NumPy 2 (an upstream bug); coil's
# interpreted launches convert such bounds (coil.runtime.interpreter `_scalar_index`; generated
# kernels also through triton-codegen's `_coil_index`).
ON_TRITON_BEFORE_3_9: dict[str, str] = {}


def reason_for(nodeid: str, *, cuda: bool, triton_before_3_9: bool) -> str | None:
    """Why the test `nodeid` (`file.py::name[params]`) is expected to fail here, or None."""
    tables = ([ON_CUDA] if cuda else []) + ([ON_TRITON_BEFORE_3_9] if triton_before_3_9 else [])
    for table in tables:
        for key, reason in table.items():
            if nodeid == key or (key.endswith(("[", "-")) and nodeid.startswith(key)):
                return reason
    return None
