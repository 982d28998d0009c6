"""coil.wrapper_codegen: the Wrapper IR (structured lines) and its emitters (Python source, torch.fx).

Public API (see README.md): the line types, `build`, `WrapperProgram`, `KernelLaunch`,
`emit_python`, `emit_line`, `pyrepr`, `emit_fx`, `emit_fx_graph`, `op_name`, `DynamicShapeError`,
`check_bound` (every size symbol bound before its use);
`plan_indirect`, `IndirectPlan`, `InputLayout` (inputs kernels read through a table of addresses);
`track_lifetimes`, `Track`, `TRACKER` (lifetime tracking as Wrapper IR lines).
"""

from coil.wrapper_codegen.emit_fx import emit_fx, emit_fx_graph
from coil.wrapper_codegen.emit_python import emit_line, emit_python, pyrepr
from coil.wrapper_codegen.indirect import IndirectPlan, InputLayout, plan_indirect
from coil.wrapper_codegen.lines import (
    TRACKER,
    Allocate,
    BindSymbol,
    CheckInput,
    ExternCall,
    Free,
    KernelCall,
    Line,
    Ref,
    Return,
    Reuse,
    SizeOf,
    Track,
    Unpack,
    View,
)
from coil.wrapper_codegen.plan import KernelLaunch, WrapperProgram, build, op_name
from coil.wrapper_codegen.symbols import DynamicShapeError, check_bound
from coil.wrapper_codegen.tracking import track_lifetimes

__all__ = [
    "TRACKER",
    "Allocate",
    "BindSymbol",
    "CheckInput",
    "DynamicShapeError",
    "ExternCall",
    "Free",
    "IndirectPlan",
    "InputLayout",
    "KernelCall",
    "KernelLaunch",
    "Line",
    "Ref",
    "Return",
    "Reuse",
    "SizeOf",
    "Track",
    "Unpack",
    "View",
    "WrapperProgram",
    "build",
    "check_bound",
    "emit_fx",
    "emit_fx_graph",
    "emit_line",
    "emit_python",
    "op_name",
    "plan_indirect",
    "pyrepr",
    "track_lifetimes",
]
