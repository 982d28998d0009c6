"""Constant folding of uniform tensors (``full``/``zeros``/``ones``) into pointwise ops."""

from __future__ import annotations

import torch
from coil.fx_passes.fake_meta import compute_val, describe_mismatch, fake_mode_of, refresh_meta
from coil.fx_passes.infra import PassResult, Stage, graph_pass
from coil.fx_passes.ops import is_pointwise, is_random, overload_of
from torch.fx import GraphModule, Node
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ["fold_constants", "rounded", "uniform_value"]

aten = torch.ops.aten
Number = bool | int | float

_SCALAR_OTHER = frozenset({aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor})
_COMMUTATIVE = frozenset({aten.add.Tensor, aten.mul.Tensor})


def uniform_value(node: object) -> Number | None:
    """The single value every element of ``node`` holds, if it is a uniform constant.

    Recognised: ``full``, ``full_like``, ``zeros``/``zeros_like``, ``ones``/``ones_like``,
    ``scalar_tensor``. The value is rounded through the tensor's dtype (``full(0.1, fp16)``
    holds 0.0999755859375, and that is what it returns).
    """
    if not isinstance(node, Node):
        return None
    op = overload_of(node)
    raw: object
    if op in (aten.full.default, aten.full_like.default):
        raw = node.args[1]
    elif op in (aten.zeros.default, aten.zeros_like.default):
        raw = 0
    elif op in (aten.ones.default, aten.ones_like.default):
        raw = 1
    elif op is aten.scalar_tensor.default:
        raw = node.args[0]
    else:
        return None
    val = node.meta.get("val")
    if not isinstance(raw, (bool, int, float)) or not isinstance(val, torch.Tensor):
        return None
    return rounded(raw, val.dtype)


def rounded(value: Number, dtype: torch.dtype) -> Number:
    """`value` stored in a tensor of `dtype` and read back (``0.1`` in float16 is
    0.0999755859375), computed on a real CPU tensor whatever dispatch modes are active: the
    joint-graph passes run inside AOTAutograd's fake mode, where one such round trip costs
    about a hundred times as much."""
    with _disable_current_modes():
        return torch.tensor(value, dtype=dtype).item()  # type: ignore[no-any-return]


def _static_shape(t: torch.Tensor) -> list[int] | None:
    return [int(s) for s in t.shape] if all(isinstance(s, int) for s in t.shape) else None


def _fold_all_uniform(gm: GraphModule, node: Node) -> bool:
    """A pointwise op whose tensor inputs are all uniform is a uniform ``full``."""
    val = node.meta.get("val")
    tensor_args = [a for a in node.all_input_nodes]
    if not tensor_args or not isinstance(val, torch.Tensor) or not val.is_contiguous():
        return False
    values = [uniform_value(a) for a in tensor_args]
    shape = _static_shape(val)
    if any(v is None for v in values) or shape is None or val.is_complex():
        return False
    with _disable_current_modes():  # evaluated on real 0-d CPU tensors, not under the fake mode
        real = {
            a: torch.tensor(v, dtype=a.meta["val"].dtype)
            for a, v in zip(tensor_args, values, strict=True)
        }
        try:
            result = node.target(  # type: ignore[operator]
                *[real.get(a, a) if isinstance(a, Node) else a for a in node.args],
                **{k: real.get(v, v) if isinstance(v, Node) else v for k, v in node.kwargs.items()},
            )
        except Exception:
            return False
        if not isinstance(result, torch.Tensor) or result.dtype != val.dtype:
            return False
        value = result.item()
    with gm.graph.inserting_before(node):
        full = gm.graph.call_function(
            aten.full.default,
            (shape, value),
            {"dtype": val.dtype, "device": val.device, "pin_memory": False},
        )
    fake_mode = fake_mode_of(gm)
    assert fake_mode is not None
    full.meta["val"] = compute_val(full, fake_mode)
    if describe_mismatch(val, full.meta["val"]) is not None:
        gm.graph.erase_node(full)
        return False
    users = list(node.users)
    node.replace_all_uses_with(full)
    gm.graph.erase_node(node)
    refresh_meta(gm, users)
    return True


def _fold_uniform_operand(gm: GraphModule, node: Node) -> bool:
    """``x op full(c)`` -> ``x op c`` when the result's metadata is unchanged."""
    op = overload_of(node)
    if op not in _SCALAR_OTHER or len(node.args) != 2:
        return False
    x, other = node.args
    if uniform_value(x) is not None and op in _COMMUTATIVE and uniform_value(other) is None:
        x, other = other, x
    c = uniform_value(other)
    if c is None or not isinstance(x, Node) or uniform_value(x) is not None:
        return False
    old_args = node.args
    node.args = (x, c)
    fake_mode = fake_mode_of(gm)
    assert fake_mode is not None
    try:
        fresh = compute_val(node, fake_mode)
    except Exception:
        fresh = None
    if fresh is None or describe_mismatch(node.meta["val"], fresh) is not None:
        node.args = old_args  # type promotion would change: keep the tensor operand
        return False
    return True


@graph_pass("fold_constants", stages=frozenset({Stage.JOINT, Stage.POST_GRAD}))
def fold_constants(gm: GraphModule) -> PassResult:
    """Fold uniform constant tensors into the pointwise ops that read them.

    Stage: joint, post-grad.

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``. The ``full`` nodes left unused are removed by DCE.

    Example::

        before: f = full([], 8.0); y = div(x, f); o = mul(ones([4]), full([4], 3.0))
        after:  y = div(x, 8.0);              o = full([4], 3.0)

    Soundness: (1) a pointwise op whose tensor inputs are all uniform is evaluated once on
    0-d tensors of the inputs' dtypes (same dtype rules) and becomes ``full`` of the result
    (only when the result is contiguous with a static shape and its dtype is unchanged);
    (2) a uniform operand of add/sub/mul/div becomes a Python scalar only if fresh fake
    propagation gives the same dtype, shape and strides (0-d tensors and Python scalars
    promote differently in some mixed-category cases; those are kept). The scalar is the
    constant rounded through its tensor's dtype, so the value read is the same. Random ops
    (``rand``, ``bernoulli``) are never treated as constants.
    """
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or "val" not in node.meta or is_random(node):
            continue
        if not is_pointwise(node):
            continue
        if _fold_all_uniform(gm, node) or _fold_uniform_operand(gm, node):
            modified = True
    return PassResult(gm, modified)
