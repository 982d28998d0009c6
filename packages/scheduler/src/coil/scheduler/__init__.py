"""coil.scheduler: dependency analysis, fusion into kernel groups, and execution order.

Public API (see README.md): `schedule`, `Schedule`, `KernelGroup`, `Member`, `FusionLog`,
`FusionIllegal`, `LoopNest`, `canonicalize`, `order_steps`, `planner_graph`, `scatter_groups`
(a Scatter step's two kernel groups).
"""

from coil.scheduler.canonical import LoopNest, canonicalize
from coil.scheduler.fusion import FusionLog, fuse
from coil.scheduler.group import FusionIllegal, KernelGroup, Member, plan
from coil.scheduler.ordering import OrderReport, order_steps, planner_graph
from coil.scheduler.scatter import scatter_groups
from coil.scheduler.schedule import Schedule, Step, output_buffers, schedule

__all__ = [
    "FusionIllegal",
    "FusionLog",
    "KernelGroup",
    "LoopNest",
    "Member",
    "OrderReport",
    "Schedule",
    "Step",
    "canonicalize",
    "fuse",
    "order_steps",
    "output_buffers",
    "plan",
    "planner_graph",
    "scatter_groups",
    "schedule",
]
