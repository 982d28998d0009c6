"""Attention as models write it in torch IR (Dynamo's graphs), recognised as one record.

Two forms are recognised (:func:`sdpa_call`, :func:`eager_chain`); both yield an
:class:`Attention`: the tensors and flags of one call of an attention op with the signature
``(q, k, v, bias, keep, alibi, scale, causal, window, softcap)`` (docs: packages/fx-passes
README, ``attention_to_op``).

Rules are data: :data:`FUNCTIONS` and :data:`METHODS` map the callees Dynamo records (torch
functions, Python operators, tensor methods) to a kind; every recogniser reads nodes through
:func:`kind_of`. A form that does not match in every detail is not recognised (None).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from coil.fx_passes.passes.causal_mask import static_value, value_of
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

__all__ = [
    "FUNCTIONS",
    "MAX_HEAD_DIM",
    "METHODS",
    "Attention",
    "eager_chain",
    "kind_of",
    "sdpa_call",
    "unwidened",
]

MAX_HEAD_DIM = 256  # the op's limit on D
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

FUNCTIONS: dict[object, str] = {
    torch.matmul: "matmul", operator.matmul: "matmul",
    torch.transpose: "transpose", torch.permute: "permute",
    operator.mul: "mul", operator.imul: "mul", torch.mul: "mul",
    operator.truediv: "div", operator.itruediv: "div", torch.div: "div", torch.true_divide: "div",
    operator.add: "add", operator.iadd: "add", torch.add: "add",
    torch.tanh: "tanh", torch.softmax: "softmax", F.softmax: "softmax",
    F.dropout: "dropout", torch.dropout: "dropout", torch.masked_fill: "masked_fill",
    operator.getitem: "getitem", torch.reshape: "reshape", torch.unsqueeze: "unsqueeze",
    torch.repeat_interleave: "repeat_interleave",
    F.scaled_dot_product_attention: "sdpa", torch._C._nn.scaled_dot_product_attention: "sdpa",
}  # fmt: skip
"""torch functions and Python operators, by kind."""

METHODS: dict[str, str] = {
    "matmul": "matmul", "transpose": "transpose", "permute": "permute", "mul": "mul",
    "div": "div", "add": "add", "tanh": "tanh", "softmax": "softmax", "masked_fill": "masked_fill",
    "reshape": "reshape", "view": "reshape", "expand": "expand", "unsqueeze": "unsqueeze",
    "repeat_interleave": "repeat_interleave",
    "float": "cast", "half": "cast", "bfloat16": "cast", "double": "cast", "to": "cast",
    "type_as": "cast", "type": "cast", "contiguous": "cast",
}  # fmt: skip
"""Tensor methods, by kind (``cast``: a copy that may change only the dtype)."""

_IN_PLACE = frozenset({operator.iadd, operator.imul, operator.itruediv})


@dataclass
class Attention:
    """One recognised attention: the op call's operands and the nodes it replaces.

    ``anchor`` is the node whose value the op's ``out`` replaces (the SDPA call, or the final
    ``matmul(p, v)``); ``chain`` the eager intermediates removed with it (each used only by the
    next). ``biases`` are summed, ``keeps`` and-ed, ``drops`` (masked_fill's masks) negated.
    """

    anchor: Node
    q: Node
    k: Node
    v: Node
    scale: float
    causal: bool = False
    window: int = 0
    softcap: float = 0.0
    biases: list[Node] = field(default_factory=list)
    keeps: list[Node] = field(default_factory=list)
    drops: list[Node] = field(default_factory=list)
    alibi: Node | None = None
    chain: list[Node] = field(default_factory=list)
    eager: bool = False

    def needs_op(self) -> bool:
        """Whether SDPA could not run this on its flash kernel: an eager chain, a mask or
        bias tensor, a window or ALiBi (what mode "auto" rewrites)."""
        return bool(self.eager or self.biases or self.keeps or self.drops or self.window
                    or self.alibi is not None or self.softcap)


def kind_of(node: object) -> str | None:
    """The kind of a node's callee (:data:`FUNCTIONS`, :data:`METHODS`), or None."""
    if not isinstance(node, Node):
        return None
    if node.op == "call_method":
        return METHODS.get(str(node.target))
    if node.op != "call_function":
        return None
    try:
        return FUNCTIONS.get(node.target)
    except TypeError:  # an unhashable callee
        return None


def _arg(node: Node, index: int, name: str, default: object = None) -> object:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _same(a: object, b: object) -> bool:
    """Sizes equal for every value of their symbols."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    try:
        return bool(statically_known_true(a == b))  # type: ignore[arg-type]
    except Exception:
        return False


def _same_shape(a: torch.Size | tuple[Any, ...], b: torch.Size | tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))


def _only_user(node: Node) -> Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _number(arg: object, cache: dict[Node, Any]) -> float | None:
    """A Python number, or a one-element tensor computed from sizes alone, as a float."""
    if isinstance(arg, bool):
        return None
    if isinstance(arg, int | float):
        return float(arg)
    if isinstance(arg, Node):
        value = static_value(arg, cache)
        if value is not None and value.numel() == 1 and not value.is_complex() and value.dtype != torch.bool:
            return float(value.item())
    return None


def _qkv_ok(q: Node, k: Node, v: Node) -> bool:
    """q (B, H, Sq, D); k, v (B, Hkv, Sk, D) with H % Hkv == 0; one float dtype and device;
    head counts and D static, D <= MAX_HEAD_DIM."""
    qv, kv, vv = value_of(q), value_of(k), value_of(v)
    if qv is None or kv is None or vv is None or not qv.dim() == kv.dim() == vv.dim() == 4:
        return False
    if qv.dtype not in _DTYPES or not qv.dtype == kv.dtype == vv.dtype:
        return False
    if not qv.device == kv.device == vv.device:
        return False
    h, hkv, d = qv.shape[1], kv.shape[1], qv.shape[3]
    if not all(isinstance(x, int) for x in (h, hkv, d)) or hkv < 1 or h % hkv or d > MAX_HEAD_DIM:
        return False
    return (_same_shape(kv.shape, vv.shape) and _same(qv.shape[0], kv.shape[0])
            and _same(kv.shape[3], d))


def _unsqueezed_at_2(node: object) -> Node | None:
    """``x`` when ``node`` is ``x[:, :, None]`` (full slices and one None) or ``x.unsqueeze(2)``;
    the caller checks the shapes."""
    if not isinstance(node, Node) or not node.args or not isinstance(node.args[0], Node):
        return None
    kind = kind_of(node)
    if kind == "getitem":
        index = node.args[1]
        if not isinstance(index, tuple) or sum(i is None for i in index) != 1:
            return None
        if all(i is None or i is Ellipsis or i == slice(None) for i in index):
            return node.args[0]
        return None
    if kind == "unsqueeze" and _arg(node, 1, "dim") in (2, -3):
        return node.args[0]
    return None


def unwidened(kv: Node) -> Node:
    """The key/value heads before grouped-query widening, else ``kv`` itself.

    Widening is HF's ``repeat_kv`` (``x[:, :, None].expand(B, Hkv, n, S, D).reshape(B, Hkv * n,
    S, D)``) or ``x.repeat_interleave(n, dim=1)``: both give query head h the key/value head
    h // n, which is what the op does with the un-widened tensor. Shapes are checked on the
    recorded values (B, Hkv, S, D) -> (B, Hkv * n, S, D)."""
    kind = kind_of(kv)
    out = value_of(kv)
    if out is None or out.dim() != 4 or not kv.args or not isinstance(kv.args[0], Node):
        return kv
    source: Node | None = None
    if kind == "repeat_interleave":
        repeats, dim = _arg(kv, 1, "repeats"), _arg(kv, 2, "dim")
        if isinstance(repeats, int) and dim in (1, -3) and _arg(kv, 3, "output_size") is None:
            source = kv.args[0]
    elif kind == "reshape" and kind_of(kv.args[0]) == "expand":
        expanded = kv.args[0]
        x = _unsqueezed_at_2(expanded.args[0])
        ev, uv = value_of(expanded), value_of(expanded.args[0])
        xv = value_of(x)
        if x is not None and ev is not None and uv is not None and xv is not None and xv.dim() == 4:
            b, hkv, s, d = xv.shape
            n = ev.shape[2] if ev.dim() == 5 else None
            if (isinstance(n, int) and _same_shape(uv.shape, (b, hkv, 1, s, d))
                    and _same_shape(ev.shape, (b, hkv, n, s, d))):
                source = x
    xv = value_of(source)
    if source is None or xv is None or xv.dim() != 4:
        return kv
    hkv, h = xv.shape[1], out.shape[1]
    if not isinstance(hkv, int) or not isinstance(h, int) or hkv < 1 or h % hkv:
        return kv
    if not _same_shape(out.shape, (xv.shape[0], h, xv.shape[2], xv.shape[3])):
        return kv
    return source


def _heads(q: Node, k: Node, v: Node) -> tuple[Node, Node]:
    """k and v un-widened when both were widened to the same head count, else as given."""
    k2, v2 = unwidened(k), unwidened(v)
    kv, vv = value_of(k2), value_of(v2)
    if kv is not None and vv is not None and _same_shape(kv.shape, vv.shape) and _qkv_ok(q, k2, v2):
        return k2, v2
    return k, v


def sdpa_call(node: Node) -> Attention | None:
    """``scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale,
    enable_gqa)`` with ``dropout_p == 0``: a bool mask keeps, a float mask is a bias; the scale
    defaults to 1/sqrt(D); widened k, v are un-widened (:func:`unwidened`)."""
    if kind_of(node) != "sdpa" or len(node.args) < 3:
        return None
    q, k, v = node.args[:3]
    mask, dropout = _arg(node, 3, "attn_mask"), _arg(node, 4, "dropout_p", 0.0)
    causal, scale = _arg(node, 5, "is_causal", False), _arg(node, 6, "scale")
    if not all(isinstance(x, Node) for x in (q, k, v)) or len(node.args) > 8:
        return None
    assert isinstance(q, Node) and isinstance(k, Node) and isinstance(v, Node)
    if isinstance(dropout, bool) or not isinstance(dropout, int | float) or dropout != 0:
        return None
    if not isinstance(causal, bool) or (causal and mask is not None):
        return None
    k, v = _heads(q, k, v)
    qv = value_of(q)
    if qv is None or not _qkv_ok(q, k, v):
        return None
    if scale is None:
        scale = qv.shape[-1] ** -0.5
    if isinstance(scale, bool) or not isinstance(scale, int | float):
        return None
    att = Attention(node, q, k, v, float(scale), causal=causal)
    if isinstance(mask, Node):
        mv = value_of(mask)
        if mv is None or mv.dim() > 4:
            return None
        if mv.dtype == torch.bool:
            att.keeps.append(mask)
        elif mv.is_floating_point():
            att.biases.append(mask)
        else:
            return None
    elif mask is not None:
        return None
    return att


def _untransposed(kt: object) -> Node | None:
    """k when ``kt`` is k with its last two dims swapped (4-D): ``transpose`` of dims {2, 3}
    (or {-1, -2}), ``permute(0, 1, 3, 2)``."""
    if not isinstance(kt, Node) or not kt.args or not isinstance(kt.args[0], Node):
        return None
    kv = value_of(kt.args[0])
    if kv is None or kv.dim() != 4:
        return None
    kind = kind_of(kt)
    if kind == "transpose":
        pair = [_arg(kt, 1, "dim0"), _arg(kt, 2, "dim1")]
        if all(isinstance(d, int) for d in pair) and {d % 4 for d in pair if isinstance(d, int)} == {2, 3}:
            return kt.args[0]
    elif kind == "permute":
        given = kt.args[1:] if len(kt.args) > 2 else _arg(kt, 1, "dims")
        dims = list(given) if isinstance(given, list | tuple) else []
        if all(isinstance(d, int) for d in dims) and [d % 4 for d in dims if isinstance(d, int)] == [0, 1, 3, 2]:
            return kt.args[0]
    return None


@dataclass
class _Walk:
    """The state of an eager chain's forward walk."""

    att: Attention
    shape: torch.Size
    device: torch.device
    stage: int = 0  # 0: scaling; 1: after the softcap; 2: after a bias or mask
    dtype_readers: list[Node] = field(default_factory=list)

    def next(self, x: Node) -> Node | None:
        """The one user of the chain value ``x``, not counting a ``type_as(., x)`` that reads
        only its dtype (T5's cast back), which must itself be in the chain at the end."""
        readers = [u for u in x.users if u.op == "call_method" and u.target == "type_as"
                   and len(u.args) == 2 and u.args[1] is x and u.args[0] is not x]
        self.dtype_readers += readers
        users = [u for u in x.users if u not in readers]
        return users[0] if len(users) == 1 else None


def _scores_like(node: Node, walk: _Walk) -> bool:
    """A chain value: the scores' shape and device, a float dtype."""
    v = value_of(node)
    return (v is not None and v.is_floating_point() and v.device == walk.device
            and _same_shape(v.shape, walk.shape))


def _factor(node: Node, x: Node, cache: dict[Node, Any]) -> float | None:
    """The constant ``node`` (mul or div) applies to the chain value ``x``: ``x * c``, ``c * x``
    (mul) or ``x / c`` (div: its reciprocal); None for another form."""
    kind = kind_of(node)
    if len(node.args) != 2 or (node.kwargs and kind != "div") or node.kwargs.get("rounding_mode") is not None:
        return None
    a, b = node.args
    if kind == "mul":
        c = _number(b, cache) if a is x else _number(a, cache) if b is x and node.target not in _IN_PLACE else None
        return c
    if kind == "div" and a is x:
        c = _number(b, cache)
        return None if c is None or c == 0 else 1.0 / c
    return None


def _softcap(node: Node, x: Node, walk: _Walk, cache: dict[Node, Any]) -> Node | None:
    """The last node of ``tanh(x / c) * c`` starting at ``node`` (the division), with the cap
    recorded; None when it is not that form."""
    if kind_of(node) != "div" or node.args[0] is not x or walk.stage != 0:
        return None
    cap = _number(node.args[1], cache) if len(node.args) == 2 and not node.kwargs else None
    tanh = _only_user(node)
    if cap is None or cap <= 0 or tanh is None or kind_of(tanh) != "tanh" or tanh.args != (node,) or tanh.kwargs:
        return None
    mul = _only_user(tanh)
    if mul is None or kind_of(mul) != "mul" or _factor(mul, tanh, cache) != cap:
        return None
    if not all(_scores_like(n, walk) for n in (node, tanh, mul)):
        return None
    walk.att.softcap = cap
    walk.att.chain += [node, tanh]
    return mul


def _before_softmax(node: Node, x: Node, walk: _Walk, cache: dict[Node, Any]) -> Node | None:
    """Take one step of the chain from ``x`` to its user ``node`` before the softmax; the node
    the chain continues from, or None (not a recognised step)."""
    kind = kind_of(node)
    att = walk.att
    if kind in ("mul", "div") and walk.stage == 0:
        after = _only_user(node)
        if kind == "div" and after is not None and kind_of(after) == "tanh":
            end = _softcap(node, x, walk, cache)
            walk.stage = 1
            return end
        c = _factor(node, x, cache)
        if c is None:
            return None
        att.scale *= c
        return node
    if kind == "add":
        if len(node.args) != 2 or _arg(node, 2, "alpha", 1) != 1:
            return None
        a, b = node.args
        other = b if a is x else a if (b is x and node.target not in _IN_PLACE) else None
        ov = value_of(other)
        if not isinstance(other, Node) or ov is None or not ov.is_floating_point() or ov.dim() > 4:
            return None
        att.biases.append(other)
        walk.stage = 2
        return node
    if kind == "masked_fill":
        mask, fill = _arg(node, 1, "mask"), _arg(node, 2, "value")
        mv = value_of(mask)
        if node.args[0] is not x or fill != float("-inf") or mv is None or mv.dtype != torch.bool or mv.dim() > 4:
            return None
        assert isinstance(mask, Node)
        att.drops.append(mask)
        walk.stage = 2
        return node
    return node if kind == "cast" and node.args[0] is x else None


def _after_softmax(node: Node, x: Node) -> bool:
    """Whether ``node`` is a step between the softmax and the product with v: a cast, or a
    dropout that drops nothing (p == 0 or not training)."""
    if not node.args or node.args[0] is not x:
        return False
    kind = kind_of(node)
    if kind == "dropout":
        p = _arg(node, 1, "p", 0.5)
        training = _arg(node, 2, "training" if node.target is F.dropout else "train", True)
        return (isinstance(p, int | float) and p == 0) or training is False
    return kind == "cast"


def eager_chain(scores: Node, cache: dict[Node, Any]) -> Attention | None:
    """The attention whose scores are ``scores = matmul(q, kᵀ)``, written out:
    ``[* s | / s]... [tanh(x / c) * c] [+ bias | masked_fill(m, -inf)]... -> softmax(-1) ->
    [dropout that drops nothing] -> matmul(., v)``, with dtype casts anywhere between. Every
    intermediate must have exactly one user (scores or probabilities that are also returned
    or read elsewhere leave the chain as it is)."""
    if kind_of(scores) != "matmul" or len(scores.args) != 2 or scores.kwargs:
        return None
    q, k = scores.args[0], _untransposed(scores.args[1])
    sv = value_of(scores)
    if not isinstance(q, Node) or k is None or sv is None or sv.dim() != 4:
        return None
    walk = _Walk(Attention(scores, q, k, k, 1.0, eager=True), sv.shape, sv.device)
    att, x = walk.att, scores
    while True:  # scores -> softmax
        att.chain.append(x)
        user = walk.next(x)
        if user is None or not _scores_like(user, walk):
            return None
        if kind_of(user) == "softmax":
            break
        step = _before_softmax(user, x, walk, cache)
        if step is None:
            return None
        x = step
    dim = _arg(user, 1, "dim")
    if user.args[0] is not x or not isinstance(dim, int) or dim % 4 != 3:
        return None
    x = user
    while True:  # softmax -> matmul(p, v)
        att.chain.append(x)
        user = walk.next(x)
        if user is None:
            return None
        if kind_of(user) == "matmul":
            break
        if not _after_softmax(user, x) or not _scores_like(user, walk):
            return None
        x = user
    v = user.args[1] if len(user.args) == 2 and user.args[0] is x and not user.kwargs else None
    if not isinstance(v, Node) or not set(walk.dtype_readers) <= set(att.chain):
        return None
    att.anchor = user
    att.k, att.v = _heads(q, k, v)
    qv, out = value_of(q), value_of(user)
    if qv is None or out is None or out.dtype != qv.dtype or not _qkv_ok(q, att.k, att.v):
        return None
    if not _same_shape(out.shape, (*qv.shape[:3], qv.shape[3])):
        return None
    return att
