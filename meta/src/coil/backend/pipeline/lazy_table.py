"""A read-only mapping built on its first read: coil's decomposition table for AOTAutograd.

Building `lowering_ir.decomposition_table()` is a visible cost per process (torch's
`core_aten_decompositions()` materialises the CompositeImplicitAutograd ops). AOTAutograd reads
the table only when it traces; a hit in its cache (`coil.backend.caches.aot_cache`: every warm start)
never reads it, so a warm start should not pay for it. `LazyTable(build)` calls `build` on the
first read of any kind (a key, its length, iteration) and never again; until then it holds
nothing. Reads are those of a plain dict, so `{**table}`, `dict(table)` and `table or {}` (how
torch's AOTAutograd and make_fx take the table) see the built contents.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["LazyTable"]


class LazyTable(Mapping[Any, Any]):
    """`build()`'s dict, built at the first read (once, also under concurrent first reads)."""

    def __init__(self, build: Callable[[], Mapping[Any, Any]]) -> None:
        self._build = build
        self._table: dict[Any, Any] | None = None
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        """Whether a read has built the table yet."""
        return self._table is not None

    def _get(self) -> dict[Any, Any]:
        if self._table is None:
            with self._lock:
                if self._table is None:
                    self._table = dict(self._build())
        return self._table

    def __getitem__(self, key: Any) -> Any:
        return self._get()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __contains__(self, key: object) -> bool:
        return key in self._get()

    def __repr__(self) -> str:
        return f"LazyTable({len(self)} entries)" if self.built else "LazyTable(not built)"
