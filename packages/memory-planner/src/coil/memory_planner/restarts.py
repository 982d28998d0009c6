"""Restarted packing searches for one capacity, on a schedule that resumes across calls.

A depth-first packing search's running time depends heavily on its block order: the same
instance is solved in a few hundred nodes under one order and not in hundreds of thousands
under another. :class:`Restarts` therefore runs the search of
:mod:`~coil.memory_planner.search` under each block order of ``GREEDY_ORDERS`` in turn, with a
node limit that doubles every round, so an order that needs many nodes gets them eventually
and no single order can stall the rest.

Every search stops at its node limit, not at a clock, so the sequence of searches and the
packing found do not depend on how fast the machine is or how much CPU it gets; only whether
the deadline comes first does. :meth:`Restarts.run` resumes the schedule where the previous
call stopped; a search cut short by the deadline is run again from its start.
"""

from __future__ import annotations

import time

from coil.memory_planner.greedy import GREEDY_ORDERS
from coil.memory_planner.search import Prepared, search_prepared

__all__ = ["Restarts"]

_ORDERS = ("size", "length", "start", "area")
_FIRST_NODES = 2000  # node limit of the first round; each round doubles it


class Restarts:
    """Searches for a packing of ``prep``'s blocks into ``capacity`` bytes.

    Each step runs the aggressive search (fast, incomplete) under one block order; when it
    exhausts its tree within the node limit, the complete search runs with the same order and
    limit, so the schedule can also prove that no packing fits.

    Attributes:
        infeasible: set when a complete search proved that no packing fits ``capacity``.
        searches: schedule steps finished so far (cut-short steps not counted).
    """

    def __init__(self, prep: Prepared, capacity: int) -> None:
        self.prep = prep
        self.capacity = capacity
        self.infeasible = False
        self.searches = 0
        self._orders = [GREEDY_ORDERS[name](prep.blocks) for name in _ORDERS]

    def run(self, deadline: float) -> dict[str, int] | None:
        """Search until a packing is found, infeasibility is proved, or ``deadline`` (a
        ``time.monotonic()`` value) passes; returns the packing (block id -> offset) or None.
        """
        while not self.infeasible and time.monotonic() < deadline:
            step = self.searches
            order = self._orders[step % len(self._orders)]
            nodes = _FIRST_NODES << (step // len(self._orders))
            found, finished = self._step(order, nodes, deadline)
            if not finished:
                return None
            self.searches += 1
            if found is not None:
                return found
        return None

    def _step(
        self, order: list[int], nodes: int, deadline: float
    ) -> tuple[dict[str, int] | None, bool]:
        """One schedule step: (packing or None, whether it finished before the deadline)."""
        for aggressive in (True, False):
            res = search_prepared(
                self.prep,
                self.capacity,
                time_limit=deadline - time.monotonic(),
                priority=order,
                node_limit=nodes,
                aggressive=aggressive,
            )
            if res.offsets is not None:
                return res.offsets, True
            if res.infeasible:
                self.infeasible = True
                return None, True
            if time.monotonic() >= deadline:
                return None, False
            if res.nodes >= nodes:  # stopped by the node limit: the next step goes on
                return None, True
        return None, True
