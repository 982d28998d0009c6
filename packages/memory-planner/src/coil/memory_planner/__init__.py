"""coil.memory_planner: op ordering for low peak memory, arena packing and buffer reuse.

Standard library only (matplotlib, for :func:`timeline_png`, is an optional extra imported on
use). See the package README for the API, the liveness rules and the file formats.
"""

from coil.memory_planner.arena import Block, Packing, live_lower_bound, validate_packing
from coil.memory_planner.formats import (
    InputError,
    read_blocks_csv,
    read_graph_json,
    write_blocks_csv,
    write_graph_json,
)
from coil.memory_planner.graph import (
    Buffer,
    Graph,
    GraphError,
    Node,
    live_bytes_per_step,
    peak_of_order,
)
from coil.memory_planner.greedy import greedy_by_size
from coil.memory_planner.lifetimes import blocks_from_order, lifetimes_from_order
from coil.memory_planner.order_search import (
    OrderResult,
    beam_order,
    best_order,
    exact_order,
    improve_order,
)
from coil.memory_planner.orders import bfs_order, dfs_order, lpmf_order
from coil.memory_planner.pack import pack
from coil.memory_planner.plot import timeline_png, timeline_series
from coil.memory_planner.reuse import BufferLifetime, ReusePlan, check_reuse_plan, plan_reuse
from coil.memory_planner.search import SearchResult, search_packing

__all__ = [
    "Block",
    "Buffer",
    "BufferLifetime",
    "Graph",
    "GraphError",
    "InputError",
    "Node",
    "OrderResult",
    "Packing",
    "ReusePlan",
    "SearchResult",
    "beam_order",
    "best_order",
    "bfs_order",
    "blocks_from_order",
    "check_reuse_plan",
    "dfs_order",
    "exact_order",
    "greedy_by_size",
    "improve_order",
    "lifetimes_from_order",
    "live_bytes_per_step",
    "live_lower_bound",
    "lpmf_order",
    "pack",
    "peak_of_order",
    "plan_reuse",
    "read_blocks_csv",
    "read_graph_json",
    "search_packing",
    "timeline_png",
    "timeline_series",
    "validate_packing",
    "write_blocks_csv",
    "write_graph_json",
]
