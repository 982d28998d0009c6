"""coil.scheduler: dependency analysis, fusion into kernel groups, and execution order.

Public API (see README.md): `schedule`, `Schedule`, `KernelGroup`, `ComboGroup` (independent
small groups launched as one kernel, `combo.py`; `COMBO_MAX_PARTS`), `Member`, `FusionLog`,
`FusionIllegal`, `LoopNest`, `canonicalize`, `order_steps`, `planner_graph`, `scatter_groups`
(a Scatter step's two kernel groups); matrix products as kernel groups with their pointwise
epilogue (`matmul.py`): `MATMUL_OPS`, `MatmulProduct`, `MatmulCandidate`, `matmul_candidates`,
`apply_matmul_candidates`, `with_matmul_templates`, `is_matmul_group`, `matmul_product`,
`matmul_operands`; functional collectives (`collectives.py`, `overlap.py`): `is_launch`, `is_wait`,
`launch_steps`, `in_flight_reads`, `overlap_order`.
"""

from coil.scheduler.canonical import LoopNest, canonicalize
from coil.scheduler.collectives import in_flight_reads, is_launch, is_wait, launch_steps
from coil.scheduler.combo import COMBO_MAX_PARTS, ComboGroup
from coil.scheduler.fusion import FusionLog, fuse
from coil.scheduler.group import FusionIllegal, KernelGroup, Member, plan
from coil.scheduler.matmul import (
    MATMUL_OPS,
    MatmulCandidate,
    MatmulOperands,
    MatmulProduct,
    apply_matmul_candidates,
    is_matmul_group,
    matmul_candidates,
    matmul_operands,
    matmul_product,
    with_matmul_templates,
)
from coil.scheduler.ordering import OrderReport, order_steps, planner_graph
from coil.scheduler.overlap import overlap_order
from coil.scheduler.scatter import scatter_groups
from coil.scheduler.schedule import Schedule, Step, output_buffers, schedule

__all__ = [
    "COMBO_MAX_PARTS",
    "MATMUL_OPS",
    "ComboGroup",
    "FusionIllegal",
    "FusionLog",
    "KernelGroup",
    "LoopNest",
    "MatmulCandidate",
    "MatmulOperands",
    "MatmulProduct",
    "Member",
    "OrderReport",
    "Schedule",
    "Step",
    "apply_matmul_candidates",
    "canonicalize",
    "fuse",
    "in_flight_reads",
    "is_launch",
    "is_matmul_group",
    "is_wait",
    "launch_steps",
    "matmul_candidates",
    "matmul_operands",
    "matmul_product",
    "order_steps",
    "output_buffers",
    "overlap_order",
    "plan",
    "planner_graph",
    "scatter_groups",
    "schedule",
    "with_matmul_templates",
]
