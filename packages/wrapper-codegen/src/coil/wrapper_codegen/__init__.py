"""coil.wrapper_codegen: the Wrapper IR (structured lines) and its Python emitter.

Public API (see README.md): the line types, `build`, `WrapperProgram`, `KernelLaunch`,
`emit_python`, `emit_line`, `DynamicShapeError`.
"""

from coil.wrapper_codegen.emit_python import emit_line, emit_python, pyrepr
from coil.wrapper_codegen.lines import (
    Allocate,
    ExternCall,
    Free,
    KernelCall,
    Line,
    Ref,
    Return,
    Reuse,
    SizeOf,
    Unpack,
    View,
)
from coil.wrapper_codegen.plan import (
    DynamicShapeError,
    KernelLaunch,
    WrapperProgram,
    build,
    op_name,
)

__all__ = [
    "Allocate",
    "DynamicShapeError",
    "ExternCall",
    "Free",
    "KernelCall",
    "KernelLaunch",
    "Line",
    "Ref",
    "Return",
    "Reuse",
    "SizeOf",
    "Unpack",
    "View",
    "WrapperProgram",
    "build",
    "emit_line",
    "emit_python",
    "op_name",
    "pyrepr",
]
