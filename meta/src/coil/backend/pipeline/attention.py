"""coil's attention op in the pipeline (COIL_ATTENTION).

`coil.runtime.attention` defines the torch.library ops `coil::attention` and
`coil::attention_backward` when imported (docs/contracts.md). `register()` imports it once per
process, before anything is traced or loaded, and makes its ops intended externs of the lowering
(`coil.lowering_ir.register_externs`), so a graph that calls them, rewritten here or loaded from
a cache, runs them as planned calls, not as fallbacks. `pre_grad_pass()` is the pass
`coil.fx_passes.attention_to_op` for the knob's mode, run first in the pre-grad pipeline:

- `off` (the default): none; attention stays as the model wrote it.
- `always`: every SDPA call and eager softmax chain the pass recognises becomes the op.
- `auto`: only those SDPA cannot hand to its flash kernel (a mask or bias tensor, a window,
  ALiBi, an eager chain); plain and causal SDPA calls stay.

Without the runtime module (a runtime that does not define the op) there is no pass, whatever
the knob says.
"""

from __future__ import annotations

import functools
import importlib
import logging
from typing import Any

from coil.backend.config.modes import knob_mode
from coil.fx_passes import GraphPass, attention_to_op
from coil.knobs import knobs
from coil.lowering_ir import register_externs

log = logging.getLogger("coil.backend")

MODES = ("off", "auto", "always")
_MODULE = "coil.runtime.attention"


def mode() -> str:
    """COIL_ATTENTION as "off", "auto" or "always" (0/false/no count as off). ValueError for
    another value."""
    return knob_mode("COIL_ATTENTION", knobs.attention, MODES)


@functools.cache
def register() -> tuple[Any, ...]:
    """Import the runtime's attention module and register its ops (`OPS`) as intended externs;
    the ops, or () when the runtime has no such module."""
    try:
        module = importlib.import_module(_MODULE)
    except ModuleNotFoundError as e:
        if e.name != _MODULE:  # the module exists and one of its imports is missing: a real error
            raise
        log.debug("coil: %s does not exist: no attention op", _MODULE)
        return ()
    ops = tuple(module.OPS)
    register_externs(*ops)
    return ops


def pre_grad_pass() -> GraphPass | None:
    """The attention rewrite for COIL_ATTENTION's mode, or None (off, or no op registered)."""
    m = mode()
    if m == "off" or not register():
        return None
    import torch

    return attention_to_op(torch.ops.coil.attention.default, m)
