"""The partitioner coil hands AOTAutograd: torch's min-cut partition, then coil's post-processing.

`partition(joint, joint_inputs, **kwargs)` has AOTAutograd's `partition_fn` signature. It runs
torch's `min_cut_rematerialization_partition`; then, with COIL_RECOMPUTE_PARAM_CASTS, casts of
parameters saved for the backward are replaced by the parameters and recomputed there
(`param_casts.recompute_param_casts`); last, the backward module is made to pickle its tensors by
value (`aot_cache.portable_module`), because torch keeps that very module in its AOTAutograd
cache entry (the backward compiler only gets a copy).
"""

from __future__ import annotations

from typing import Any

import torch.fx
from coil.backend.caches import aot_cache
from coil.backend.pipeline.param_casts import recompute_param_casts
from coil.knobs import knobs


def partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> tuple[Any, Any]:
    """(forward module, backward module) of `joint` (see the module docstring)."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    fw_module, bw_module = min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
    if knobs.recompute_param_casts:
        recompute_param_casts(fw_module, bw_module, kwargs["num_fwd_outputs"],
                              kwargs.get("static_lifetime_input_indices"))
    aot_cache.portable_module(bw_module)
    return fw_module, bw_module
