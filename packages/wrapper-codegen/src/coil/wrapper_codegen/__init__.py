"""coil.wrapper_codegen: the Wrapper IR (structured lines) and its emitters (Python source, torch.fx).

Public API (see README.md): the line types, `build`, `WrapperProgram`, `KernelLaunch`,
`emit_python`, `emit_line`, `pyrepr`, `emit_fx`, `emit_fx_graph`, `op_name`, `DynamicShapeError`,
`check_bound` (every size symbol bound before its use);
`plan_indirect`, `IndirectPlan`, `InputLayout` (inputs kernels read through a table of addresses);
`track_lifetimes`, `Track`, `TRACKER` (lifetime tracking as Wrapper IR lines);
`plan_arenas`, `ArenaBuffer`, `ArenaPlan`, `ALIGNMENT`, `Arena`, `Place`, `arena_view` (buffers
packed into one allocation per device).
"""

from coil.wrapper_codegen.arena import ALIGNMENT, ArenaBuffer, ArenaPlan, plan_arenas
from coil.wrapper_codegen.emit_fx import emit_fx, emit_fx_graph
from coil.wrapper_codegen.emit_python import emit_line, emit_python, pyrepr
from coil.wrapper_codegen.indirect import IndirectPlan, InputLayout, plan_indirect
from coil.wrapper_codegen.lines import (
    TRACKER,
    Allocate,
    Arena,
    BindSymbol,
    CheckInput,
    ExternCall,
    Free,
    KernelCall,
    Line,
    Place,
    Ref,
    Return,
    Reuse,
    SizeOf,
    Track,
    Unpack,
    View,
    arena_view,
)
from coil.wrapper_codegen.plan import KernelLaunch, WrapperProgram, build, op_name
from coil.wrapper_codegen.symbols import DynamicShapeError, check_bound
from coil.wrapper_codegen.tracking import track_lifetimes

__all__ = [
    "ALIGNMENT",
    "TRACKER",
    "Allocate",
    "Arena",
    "ArenaBuffer",
    "ArenaPlan",
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
    "Place",
    "Ref",
    "Return",
    "Reuse",
    "SizeOf",
    "Track",
    "Unpack",
    "View",
    "WrapperProgram",
    "arena_view",
    "build",
    "check_bound",
    "emit_fx",
    "emit_fx_graph",
    "emit_line",
    "emit_python",
    "op_name",
    "plan_arenas",
    "plan_indirect",
    "pyrepr",
    "track_lifetimes",
]
