"""Attention masks that are the causal mask, computed from sizes alone, become ``is_causal=True``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from coil.fx_passes.infra import PassResult, Stage, graph_pass
from coil.fx_passes.ops import is_impure
from torch.fx import GraphModule, Node

__all__ = ["MAX_MASK_ELEMENTS", "SDPA_CALLS", "VALUE_KEYS", "MaskForm", "causal_masks", "mask_form", "static_value",
           "value_of"]

# masks evaluated at compile time hold at most this many elements (a [8, 1, 8192, 8192] bool
# mask is 2**29): larger ones are left alone rather than built twice
MAX_MASK_ELEMENTS = 1 << 29
# the targets of an SDPA call in Dynamo's torch IR
SDPA_CALLS = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)
# where Dynamo (example_value) and make_fx (val) keep a node's value
VALUE_KEYS = ("example_value", "val")
_MASK, _CAUSAL = 3, 5  # positions of attn_mask and is_causal in SDPA's signature


@graph_pass("causal_masks", stages=frozenset({Stage.PRE_GRAD}))
def causal_masks(gm: GraphModule) -> PassResult:
    """Turn ``scaled_dot_product_attention(q, k, v, attn_mask=m)`` into ``is_causal=True`` with no
    mask when ``m`` is, element for element, the causal mask.

    Stage: pre-grad (Dynamo's torch IR), so that AOTAutograd decomposes the forward and the
    backward alike.

    Why: under tracing a model library cannot look at its inputs' values to see that no
    sequence is padded, so it builds the full causal mask from ``arange``s (HF transformers'
    decoders do, where eager execution passes no mask and ``is_causal=True``); SDPA then runs
    its masked kernel, which reads the mask and computes every masked block, where the causal
    flash kernel skips them. Inductor runs the masked kernel too.

    Args:
        gm: a torch-IR graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``; modified when a call was rewritten.

    Example::

        before: m = arange(S)[None, :] <= arange(S)[:, None]; sdpa(q, k, v, attn_mask=m)
        after:  sdpa(q, k, v, is_causal=True)

    Soundness: the mask must be computable at compile time, and is computed: every node it
    depends on is a ``call_function``/``call_method`` node that is neither impure nor random
    (no placeholder, no ``get_attr``: nothing whose value a call can change), with static
    sizes, and the mask holds at most MAX_MASK_ELEMENTS elements. The value is then compared
    with SDPA's own causal mask for the call's query and key lengths (``tril`` of an L x S
    matrix of ones, over every batch and head the mask broadcasts to): a boolean mask must equal
    it, an additive mask must be 0 where it is true and -inf or its dtype's lowest value where
    it is false (a softmax weight of exactly 0 either way, as no row is wholly masked). Dropout
    and the scale are kept. Anything else is left as it is.
    """
    modified = False
    cache: dict[Node, Any] = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in SDPA_CALLS:
            continue
        mask = _arg(node, _MASK, "attn_mask")
        if not isinstance(mask, Node) or _arg(node, _CAUSAL, "is_causal") is not False:
            continue
        q, k = node.args[0], node.args[1]
        lengths = _lengths(q, k)
        value = static_value(mask, cache)
        if lengths is None or value is None or mask_form(value, *lengths) != CAUSAL:
            continue
        _set(node, _MASK, "attn_mask", None)
        _set(node, _CAUSAL, "is_causal", True)
        modified = True
    if modified:
        gm.recompile()  # the mask's nodes, now unused, go with the pipeline's dead-code pass
    return PassResult(gm, modified)


def _arg(node: Node, index: int, name: str) -> object:
    """An SDPA call's argument, positional or keyword (``is_causal`` defaults to False)."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, False if name == "is_causal" else None)


def _set(node: Node, index: int, name: str, value: bool | None) -> None:
    """Set an SDPA call's argument where the call passes it (positional or keyword)."""
    if len(node.args) > index:
        args = list(node.args)
        args[index] = value
        node.args = tuple(args)
    else:
        node.kwargs = {**node.kwargs, name: value}


def value_of(node: object) -> torch.Tensor | None:
    """The example value Dynamo recorded for a node (a FakeTensor), or None."""
    if not isinstance(node, Node):
        return None
    v = next((node.meta[key] for key in VALUE_KEYS if key in node.meta), None)
    return v if isinstance(v, torch.Tensor) else None


def _lengths(q: object, k: object) -> tuple[int, int] | None:
    """The query and key lengths (dim -2) when both are static."""
    qv, kv = value_of(q), value_of(k)
    if qv is None or kv is None or qv.dim() < 2 or kv.dim() < 2:
        return None
    length, source = qv.shape[-2], kv.shape[-2]
    return (length, source) if isinstance(length, int) and isinstance(source, int) else None


def static_value(target: Node, cache: dict[Node, Any]) -> torch.Tensor | None:
    """``target``'s value, computed now, when it depends on no input or state (module rule);
    None otherwise. Values of the nodes on the way are memoised in ``cache`` (None: refused)."""
    order: list[Node] = []
    seen: set[Node] = set()
    todo = [target]
    while todo:  # every ancestor, checked before anything runs
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in cache:
            if cache[n] is None:
                return None
            continue
        if n.op not in ("call_function", "call_method") or is_impure(n) or not _static(n):
            cache[n] = None
            return None
        order.append(n)
        todo.extend(n.all_input_nodes)
    position = {n: i for i, n in enumerate(target.graph.nodes)}
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily(), torch.no_grad():
            for n in sorted(order, key=position.__getitem__):
                cache[n] = _run(n, cache)
    except Exception:  # an op that does not run outside tracing: leave the mask alone
        for n in order:
            cache[n] = None
        return None
    value = cache[target]
    return value if isinstance(value, torch.Tensor) else None


def _static(n: Node) -> bool:
    """Whether a node's recorded value has static sizes and a bounded size, and its arguments
    hold no symbolic sizes."""
    v = value_of(n)
    if v is not None and (not all(isinstance(s, int) for s in v.shape) or v.numel() > MAX_MASK_ELEMENTS):
        return False
    symbolic: list[object] = []
    torch.fx.node.map_aggregate((n.args, n.kwargs),
                                lambda a: symbolic.append(a) if isinstance(a, torch.SymInt | torch.SymFloat
                                                                           | torch.SymBool) else a)
    return not symbolic


def _run(n: Node, env: dict[Node, Any]) -> Any:
    """One node on the values of its inputs."""
    args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: env[a])
    if n.op == "call_method":
        self_, *rest = args
        return getattr(self_, str(n.target))(*rest, **kwargs)
    assert callable(n.target)
    return n.target(*args, **kwargs)


@dataclass(frozen=True)
class MaskForm:
    """What a mask known at compile time does, in SDPA's terms: ``causal`` masks key j > query i
    (top-left aligned, as ``is_causal``), ``window`` > 0 also masks j <= i - window; neither:
    the mask masks nothing."""

    causal: bool
    window: int = 0


CAUSAL = MaskForm(True)


def mask_form(mask: torch.Tensor, length: int, source: int) -> MaskForm | None:
    """The form of ``mask`` (broadcast over its leading dims) for a query of ``length`` and keys
    of ``source``, or None when it is none of the forms (module rule).

    A boolean mask keeps where true; an additive mask keeps where 0 and masks where -inf or its
    dtype's lowest value (a softmax weight of exactly 0 either way while a row keeps one key:
    a band whose some row keeps no key is None). Causal is tested first, so a 1 x 1 mask that
    keeps its key is causal."""
    if mask.dim() < 2 or mask.shape[-2] not in (1, length) or mask.shape[-1] not in (1, source):
        return None
    if mask.dtype == torch.bool:
        open_ = mask
    elif mask.is_floating_point():
        open_ = mask == 0
        if not bool((open_ | (mask == float("-inf")) | (mask == torch.finfo(mask.dtype).min)).all()):
            return None
    else:
        return None
    tril = torch.ones(length, source, dtype=torch.bool, device=mask.device).tril()
    if bool((open_ == tril).all()):
        return CAUSAL
    if bool(open_.all()):
        return MaskForm(False)
    window = int(open_.broadcast_to(*open_.shape[:-2], length, source).sum(-1).max())
    if window < 1:
        return None
    band = tril & ~torch.ones(length, source, dtype=torch.bool, device=mask.device).tril(-window)
    if bool((open_ == band).all()) and bool(band.any(-1).all()):
        return MaskForm(True, window)
    return None
