"""The public API is frozen here: adding or removing a name must change this test."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import coil.runtime as runtime

EXPECTED_ALL = [
    "CaptureSpec",
    "CudaGraphRunner",
    "Kernel",
    "KernelCompileError",
    "KernelSpec",
    "ReplayPolicy",
    "SegmentedRunner",
    "TensorArg",
    "compile_kernels",
    "cudagraphify",
    "interpreter_enabled",
    "prefetch_kernels",
    "prestart_compile_workers",
]

EXPECTED_SIGNATURES = {
    "compile_kernels": "(specs: 'Sequence[KernelSpec]', device: 'torch.device') -> 'dict[str, Kernel]'",
    "interpreter_enabled": "(device: 'torch.device') -> 'bool'",
    "prestart_compile_workers": "() -> 'None'",
    "prefetch_kernels": "(specs: 'Sequence[KernelSpec]', device: 'torch.device') -> 'None'",
    "Kernel.__call__": "(self, grid: 'tuple[int, ...]', *args: 'object') -> 'None'",
    "CudaGraphRunner.__init__": (
        "(self, call: 'BoxedCall', example_inputs: 'Sequence[Any]', spec: 'CaptureSpec | None' = None, "
        "policy: 'ReplayPolicy | None' = None) -> 'None'"
    ),
    "CudaGraphRunner.__call__": "(self, inputs: 'list[Any]') -> 'tuple[Any, ...]'",
    "cudagraphify": (
        "(call: 'BoxedCall', spec: 'CaptureSpec | None' = None, policy: 'ReplayPolicy | None' = None, "
        "max_sites: 'int' = 256, by_shape: 'bool' = False) -> 'Callable[[list[Any]], tuple[Any, ...]]'"
    ),
    "SegmentedRunner.__init__": (
        "(self, plan: 'Mapping[str, Any]', *, capture: 'bool', "
        "static_input_indices: 'Iterable[int] | None' = None, also_static: 'Iterable[int]' = (), "
        "clone_outputs: 'bool' = True, report: 'list[str] | None' = None) -> 'None'"
    ),
    "SegmentedRunner.__call__": "(self, args: 'list[Any]') -> 'tuple[Any, ...]'",
}

EXPECTED_FIELDS = {
    "TensorArg": [("dtype", "torch.dtype")],
    "KernelSpec": [
        ("name", "str"),
        ("source", "str"),
        ("args", "tuple[TensorArg | int, ...]"),
        ("constexprs", "Mapping[str, int]"),
        ("num_warps", "int"),
        ("num_stages", "int"),
        ("debug", "bool"),
    ],
    "CaptureSpec": [
        ("static_input_indices", "tuple[int, ...] | None"),
        ("also_static", "tuple[int, ...]"),
        ("mutated_input_indices", "tuple[int, ...]"),
        ("indirect", "Any"),
        ("device", "torch.device | None"),
        ("launches", "int | None"),
    ],
    "ReplayPolicy": [
        ("clone_outputs", "bool"),
        ("static_outputs", "tuple[int, ...] | str"),
        ("hold_outputs", "bool"),
        ("lazy_clones", "bool"),
        ("pool", "Any"),
        ("borrow_inputs", "bool"),
        ("input_buffers", "Mapping[int, torch.Tensor] | None"),
    ],
}


def test_all_snapshot() -> None:
    assert sorted(runtime.__all__) == EXPECTED_ALL
    for name in runtime.__all__:
        assert getattr(runtime, name) is not None


def test_signatures_snapshot() -> None:
    got = {
        "compile_kernels": str(inspect.signature(runtime.compile_kernels)),
        "interpreter_enabled": str(inspect.signature(runtime.interpreter_enabled)),
        "prestart_compile_workers": str(inspect.signature(runtime.prestart_compile_workers)),
        "prefetch_kernels": str(inspect.signature(runtime.prefetch_kernels)),
        "Kernel.__call__": str(inspect.signature(runtime.Kernel.__call__)),
        "CudaGraphRunner.__init__": str(inspect.signature(runtime.CudaGraphRunner.__init__)),
        "CudaGraphRunner.__call__": str(inspect.signature(runtime.CudaGraphRunner.__call__)),
        "cudagraphify": str(inspect.signature(runtime.cudagraphify)),
        "SegmentedRunner.__init__": str(inspect.signature(runtime.SegmentedRunner.__init__)),
        "SegmentedRunner.__call__": str(inspect.signature(runtime.SegmentedRunner.__call__)),
    }
    assert got == EXPECTED_SIGNATURES


def test_dataclass_fields_snapshot() -> None:
    for cls_name, fields in EXPECTED_FIELDS.items():
        cls = getattr(runtime, cls_name)
        got = [(f.name, f.type) for f in dataclasses.fields(cls)]
        assert got == fields, cls_name
    spec_defaults = {f.name: f.default for f in dataclasses.fields(runtime.KernelSpec)}
    assert spec_defaults["num_warps"] == 4 and spec_defaults["num_stages"] == 1


def test_import_is_a_thin_gate() -> None:
    """Importing coil.runtime imports neither triton nor torch (they come on first use)."""
    code = (
        "import sys, coil.runtime, coil.knobs;"
        "bad = [m for m in ('triton', 'torch') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
