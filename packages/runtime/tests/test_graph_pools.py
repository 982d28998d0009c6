"""`graph_pools`' membership registry: a runner's position in its pool (`join_pool`) and the live
runners captured after it (`later_members`), against the capture order itself (the oracle: the
members appended after the position, dead ones left out)."""

from __future__ import annotations

import gc
from typing import Any

from coil.runtime import graph_pools


class Member:
    """A stand-in runner: the registry keeps weak references to members, and reads nothing else."""


def test_later_members_are_the_live_runners_captured_after_a_position() -> None:
    pool: Any = ("test pool", object())
    members = [Member() for _ in range(5)]
    try:
        positions = [graph_pools.join_pool(m, pool) for m in members]  # type: ignore[arg-type]
        assert positions == [0, 1, 2, 3, 4]
        for p, m in zip(positions, members, strict=True):
            assert list(graph_pools.later_members(pool, p)) == members[members.index(m) + 1:]
        dead = members.pop(2)
        del dead
        gc.collect()
        assert list(graph_pools.later_members(pool, 0)) == [members[1], members[2], members[3]]
        assert list(graph_pools.later_members(pool, 1)) == [members[2], members[3]]
        assert list(graph_pools.later_members(pool, 4)) == []
        late = Member()
        assert graph_pools.join_pool(late, pool) == 5, "a position stays when a member dies"  # type: ignore[arg-type]
        assert list(graph_pools.later_members(pool, 3)) == [members[3], late]
    finally:
        graph_pools.POOL_MEMBERS.pop(pool, None)
    assert list(graph_pools.later_members(("never joined",), 0)) == []
