"""Classification of FX nodes: mutating, random, impure, view, pointwise.

Every pass asks these questions through this module so that the answers agree. The rules are
conservative: a node whose effects cannot be established (a ``call_module``, a higher-order op,
an unknown Python callable that looks in-place) is impure, and impure nodes are never removed,
merged or moved across.
"""

from __future__ import annotations

import functools
import operator
import re

import torch
from torch.fx import Node

__all__ = [
    "is_impure",
    "is_mutating",
    "is_pointwise",
    "is_pure_call",
    "is_random",
    "is_view_op",
    "overload_of",
    "sets_global_state",
]

_RANDOM_NAMES = frozenset(
    {
        "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
        "bernoulli", "bernoulli_", "multinomial", "normal", "normal_", "poisson", "uniform_",
        "dropout", "dropout_", "native_dropout", "alpha_dropout", "feature_dropout",
        "feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d", "rrelu",
        "exponential_", "geometric_", "log_normal_", "cauchy_", "random_",
    }
)  # fmt: skip

_SAFE_PYTHON_CALLS: frozenset[object] = frozenset(
    {operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv,
     operator.truediv, operator.mod, operator.neg, operator.pow, operator.eq, operator.ne,
     operator.lt, operator.le, operator.gt, operator.ge}
)  # fmt: skip


def overload_of(node: Node) -> torch._ops.OpOverload | None:
    """The ATen (or custom) ``OpOverload`` a ``call_function`` node calls, else ``None``."""
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
        return node.target
    return None


def _name(target: object) -> str:
    return str(getattr(target, "__name__", "")).split(".")[-1]


# Python's in-place operators (`x += 1` as Dynamo records it): they write into a
# tensor operand, while on numbers (SymInts included) they only return a new value
_INPLACE_OPERATORS: frozenset[object] = frozenset(
    {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
     operator.imod, operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor,
     operator.ilshift, operator.irshift}
)  # fmt: skip
_INPLACE_DUNDERS = frozenset(f"__{_name(op)}__" for op in _INPLACE_OPERATORS)


@functools.cache
def _writes_an_argument(op: torch._ops.OpOverload) -> bool:
    """The schema marks an argument as written (memoised: a fact of the overload)."""
    return any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments)


@functools.cache
def _draws_random(op: torch._ops.OpOverload) -> bool:
    """The overload is tagged nondeterministic_seeded or named like a random op (memoised)."""
    return torch.Tag.nondeterministic_seeded in op.tags or _name(op.overloadpacket) in _RANDOM_NAMES


def _may_be_tensor(arg: object) -> bool:
    """False only for an operand known not to be a tensor: a Python number, or a node whose
    recorded value (``meta["val"]``, Dynamo's ``meta["example_value"]``) is not a tensor."""
    if not isinstance(arg, Node):
        return isinstance(arg, torch.Tensor)
    value = arg.meta.get("val", arg.meta.get("example_value"))
    return value is None or isinstance(value, torch.Tensor)


def is_mutating(node: Node) -> bool:
    """True when the node writes to one of its inputs (or may: unknown in-place calls).

    Python's in-place operators (``operator.iadd`` ..., the ``__iadd__`` ... methods) mutate
    their first operand unless it is known not to be a tensor (a SymInt's ``+=`` writes nothing).
    """
    op = overload_of(node)
    if op is not None:
        return _writes_an_argument(op)
    if node.op == "call_method":
        name = str(node.target)
        if name in _INPLACE_DUNDERS:
            return _may_be_tensor(node.args[0]) if node.args else True
        return (name.endswith("_") and not name.endswith("__")) or node.kwargs.get(
            "inplace"
        ) is True
    if node.op == "call_function":
        if node.target in _INPLACE_OPERATORS:
            return _may_be_tensor(node.args[0]) if node.args else True
        if (
            "out" in node.kwargs
            or node.kwargs.get("inplace") is True
            or node.target in (operator.setitem, operator.delitem)
        ):
            return True
        if getattr(node.target, "__module__", None) in ("_operator", "operator"):
            return False  # and_, or_, not_ (size guards on SymBools): the names end in "_", nothing is written
        name = _name(node.target)
        return name.endswith("_") and not name.endswith("__")
    return False


def is_random(node: Node) -> bool:
    """True for ops that draw from a random generator (their results must never be merged)."""
    op = overload_of(node)
    if op is not None:
        return _draws_random(op)
    if node.op in ("call_function", "call_method"):
        name = str(node.target) if node.op == "call_method" else _name(node.target)
        return name in _RANDOM_NAMES or node.kwargs.get("training") is True
    return False


# Functions Dynamo records in its graphs for context managers that set global state: entering
# and leaving functorch's vmap/grad/jvp and dual levels and its transform flags, forward-mode
# grad, saved-tensor hooks, SDPA's backend choice. Their results are often unused, yet dropping
# or moving a call changes what later nodes compute (a vmap whose `_vmap_decrement_nesting` is
# gone makes the next vmap's tensors "escape" it). torch.fx's own list covers grad mode,
# inference mode and autocast.
_FUNCTORCH_STATE = re.compile(r"(increment|decrement)_nesting|(enter|exit)_dual_level|dynamic_layer_stack"
                              r"|^_maybe_unsafe_set_level$|^set_.*_allowed$|^lazy_load_decompositions$")
_OTHER_STATE = (("torch._C", "_set_fwd_grad_enabled"), ("torch._C._autograd", "_saved_tensors_hooks_enable"),
                ("torch._C._autograd", "_saved_tensors_hooks_disable"), ("torch.nn.attention", "_sdpa_kernel"))


@functools.cache
def _state_setting_calls() -> frozenset[object]:
    import importlib

    from torch._functorch import predispatch

    found: set[object] = set()
    for module in (torch._C._functorch, predispatch):
        found.update(getattr(module, n) for n in dir(module) if _FUNCTORCH_STATE.search(n))
    for module_name, name in _OTHER_STATE:
        fn = getattr(importlib.import_module(module_name), name, None)
        if fn is not None:
            found.add(fn)
    return frozenset(found)


def sets_global_state(node: Node) -> bool:
    """True for a call Dynamo recorded for a context manager that sets global state (functorch
    transform levels, forward-mode grad, saved-tensor hooks, SDPA's backend): never removed or
    moved, whatever its users."""
    if node.op != "call_function":
        return False
    try:
        return node.target in _state_setting_calls()
    except TypeError:  # an unhashable target is none of them
        return False


def is_impure(node: Node) -> bool:
    """True when removing, merging or reordering the node could change the program.

    Placeholders, outputs, mutating ops, random ops, ``call_module`` (a module may hold state),
    higher-order operators, calls that set global state (`sets_global_state`) and anything
    torch.fx itself marks side-effectful are impure.
    """
    if node.op in ("placeholder", "output", "call_module"):
        return True
    if node.op == "get_attr":
        return False
    if is_mutating(node) or is_random(node):
        return True
    if node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator):
        return True
    if sets_global_state(node):
        return True
    try:
        return bool(node.is_impure())
    except Exception:  # an fx version whose is_impure needs more context: be conservative
        return True


def is_pure_call(node: Node) -> bool:
    """True for a ``call_function`` whose result depends on its arguments only.

    These are ATen ``OpOverload`` calls that neither mutate nor draw random numbers, and a few
    Python operators (``getitem``, arithmetic on sizes).
    """
    if node.op != "call_function":
        return False
    if overload_of(node) is None and node.target not in _SAFE_PYTHON_CALLS:
        return False
    return not is_impure(node)


def is_view_op(node: Node) -> bool:
    """True when the op's (first) result aliases one of its inputs without writing to it."""
    op = overload_of(node)
    if op is None:
        return False
    returns = op._schema.returns
    return (
        bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write
    )


def is_pointwise(node: Node) -> bool:
    """True for ATen ops tagged ``pointwise`` (elementwise with broadcasting)."""
    op = overload_of(node)
    return op is not None and torch.Tag.pointwise in op.tags
