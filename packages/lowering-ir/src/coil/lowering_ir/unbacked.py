"""Unbacked symbols: sizes and scalars known only when the graph runs (data-dependent shapes).

Dynamo names each value it cannot know ahead (the count of `nonzero`, a `.item()` read with
`capture_scalar_outputs`, the offset of a slice at a tensor start) by a fresh symbol `u<n>`; the
FX node making it records in `meta["unbacked_bindings"]` where that value sits in its result
(a key path: `.size()[0]`, `.storage_offset()`, the scalar itself). Such a node runs through
ATen (only the real result holds the value), and the wrapper binds each symbol right after the
call, from the result, by `SymbolBinding`s (`bind_results`). The key paths of torch's
`compute_unbacked_bindings` covered: sequence indices into the results, then `size(d)`,
`stride(d)` or `storage_offset()` of a tensor or the scalar itself, then an exact division
(`DivideByKey`) or a bool as 0/1 (`ConvertIntKey`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import LoweringError
from coil.lowering_ir.nodes import Buffer, SymbolBinding

# An example value for a data-dependent size (memory estimates, kernel configuration, the
# example arguments kernels are compiled for), clamped into the symbol's value range: large, so
# that nothing sized by it is taken for small (Inductor's unbacked_symint_fallback is the same).
UNBACKED_HINT = 8192


def reads_scalar(target: Any) -> bool:
    """Whether `target` reads a tensor's value to the host (`.item()`): ATen is the natural
    implementation, not a fallback."""
    return target in (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default)


def sym_expr(val: torch.SymInt | torch.SymFloat | torch.SymBool) -> sympy.Basic:
    """The sympy expression of a symbolic int, float or bool (a relation for a bool)."""
    return sympy.sympify(val.node.expr)


def _shape_env(val: Any) -> Any:
    if isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool):
        return val.node.shape_env
    if isinstance(val, torch.Tensor):
        mode = getattr(val, "fake_mode", None)
        return getattr(mode, "shape_env", None)
    if isinstance(val, list | tuple):
        for v in val:
            env = _shape_env(v)
            if env is not None:
                return env
    return None


def bindings_of(node: torch.fx.Node) -> dict[sympy.Symbol, tuple[Any, ...]]:
    """The unbacked symbols `node` defines, each with its key path into the node's result,
    under the names the rest of the graph uses (torch's renamings applied)."""
    raw = node.meta.get("unbacked_bindings")
    if not raw:
        return {}
    env = _shape_env(node.meta.get("val"))
    if env is not None:
        from torch.fx.experimental.symbolic_shapes import resolve_unbacked_bindings

        raw = resolve_unbacked_bindings(env, raw) or {}
    return {s: tuple(path) for s, path in raw.items()}


def bind_results(name: str, val: Any, results: Any, bound: dict[sympy.Symbol, tuple[Any, ...]],
                 fresh: Callable[[str], str]) -> tuple[Any, tuple[SymbolBinding, ...]]:
    """The results of an extern for node `name` (meta["val"] `val`, result buffers `results`)
    that defines the symbols of `bound`, and the bindings reading them.

    A scalar result (`val` a SymInt, SymFloat or SymBool) is named by a sympy Symbol: the node's
    own symbol when its value is exactly a symbol (the wrapper binds it by the call itself), else
    a fresh `scalar<n>` the bindings read. Raises LoweringError for a key path this does not cover."""
    from torch.fx.experimental.symbolic_shapes import CallMethodKey, ConvertIntKey, DivideByKey
    from torch.utils._pytree import SequenceKey

    bindings: list[SymbolBinding] = []
    if isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool):
        e = sym_expr(val)
        own = isinstance(e, sympy.Symbol) and (not bound or e in bound)
        results = e if own else sympy.Symbol(fresh("scalar"), integer=not isinstance(val, torch.SymFloat))
    for sym, path in sorted(bound.items(), key=lambda kv: str(kv[0])):
        v, res, rest = val, results, list(path)
        while rest and isinstance(rest[0], SequenceKey) and isinstance(v, list | tuple):
            idx = rest.pop(0).idx
            v, res = v[idx], res[idx] if isinstance(res, list | tuple) else None
        attr, dim = "value", 0
        if isinstance(v, torch.Tensor) and isinstance(res, Buffer):
            source = res.name
            if (len(rest) >= 2 and isinstance(rest[0], CallMethodKey) and rest[0].name in ("size", "stride")
                    and isinstance(rest[1], SequenceKey)):
                attr, dim, rest = rest[0].name, rest[1].idx, rest[2:]
            elif rest and isinstance(rest[0], CallMethodKey) and rest[0].name == "storage_offset":
                attr, rest = "storage_offset", rest[1:]
            else:
                raise LoweringError(name, "unbacked binding", f"cannot read {sym} from the result at {path}")
        elif isinstance(v, torch.SymInt | torch.SymFloat | torch.SymBool) and v is val:
            if not rest and sym == results:
                continue  # the scalar result is the symbol: bound by the call itself
            source = results.name
        else:
            raise LoweringError(name, "unbacked binding", f"cannot read {sym} from the result at {path}")
        divisor = 1
        if rest and isinstance(rest[0], DivideByKey):
            divisor, rest = int(rest[0].divisor), rest[1:]
        elif rest and isinstance(rest[0], ConvertIntKey):
            attr, rest = "int", rest[1:]
        if rest:
            raise LoweringError(name, "unbacked binding", f"cannot read {sym} from the result at {path}")
        bindings.append(SymbolBinding(sym, source, attr, dim, divisor))
    return results, tuple(bindings)


def fallback_hints(env: Any, known: set[sympy.Symbol]) -> dict[sympy.Symbol, int]:
    """An example value for each unbacked integer symbol of ShapeEnv `env` not in `known`: the
    value torch recorded for it, if any, else UNBACKED_HINT clamped into its value range."""
    from torch.utils._sympy.symbol import SymT, symbol_is_type

    recorded = getattr(env, "unbacked_var_to_val", None) or {}
    out: dict[sympy.Symbol, int] = {}
    for sym, vr in getattr(env, "var_to_range", {}).items():
        if sym in known or not isinstance(sym, sympy.Symbol) or not symbol_is_type(sym, SymT.UNBACKED_INT):
            continue
        got = recorded.get(sym)
        if isinstance(got, int | sympy.Integer):
            out[sym] = int(got)
            continue
        hint = UNBACKED_HINT
        if _finite(vr.upper):
            hint = min(hint, int(vr.upper))
        if _finite(vr.lower):
            hint = max(hint, int(vr.lower))
        out[sym] = hint
    return out


def _finite(bound: Any) -> bool:
    """Whether a value-range bound is a finite integer (not sympy's or torch's infinity)."""
    return isinstance(bound, int | sympy.Integer)
