"""Peak-bounded fusion: a fusion is refused when it would raise the peak of live bytes.

`LiveProfile` models memory the way the memory planner does, at the granularity of the original
operation order: each buffer an operation writes is live from the position its writer runs at to
the last position a reader runs at (graph outputs: to the end). A fused group runs where its
earliest member ran (`fuse` orders groups by their first member), so fusing groups `a` and `b`
moves every member of the later one earlier. That changes three kinds of lifetimes:

- a buffer written and read only inside the merged group (not a graph output) is no longer
  materialised: its bytes leave the profile (the gain fusion is for);
- a buffer written by a moved member is allocated earlier: live over a longer span;
- a buffer read by a moved member may die earlier (its last reader moved up).

A combo of groups whose outputs nothing in the graph reads (scheduler combo.py) runs where its
last member ran instead (`late`): it waits for every member's inputs, which then live longer.

`LiveProfile.peak_if_merged` recomputes exactly those lifetimes and returns the profile's peak
with them, over the positions that changed (elsewhere the profile is as it was); `merge` applies
them. `fuse` takes a fusion only when its peak stays at most the bound `unfused_peak` (the
profile before any fusion: every operation its own kernel) times (1 + slack), so fusion never
makes the planner-model peak worse than not fusing; it logs a refusal with both peaks. (The
current peak as the bound was too strict: a horizontal fusion of two split reductions' first
kernels, which saves a whole read of their input, raised a small graph's peak by one partial
buffer.) A rise of at most `TOLERATED_BYTES` above the bound is always allowed: fusions that
move only small buffers (a split reduction's partials in a small graph) are worth their bytes.

Sizes are static byte counts; a symbolic size counts as `SYMBOLIC_BYTES` (a hint). Graph inputs
are live throughout and do not move the peak, so they are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from coil.lowering_ir import Operation

SYMBOLIC_BYTES = 1 << 20
TOLERATED_BYTES = 1 << 20

__all__ = ["SYMBOLIC_BYTES", "TOLERATED_BYTES", "LiveProfile"]


class LiveProfile:
    """Live bytes per position of `ops` (see the module docstring), kept up to date as groups
    merge. `nbytes(op, buffer)` gives a written buffer's bytes; `outputs` are the graph's
    output buffers (live to the end)."""

    def __init__(self, ops: Sequence[Operation], outputs: set[str],
                 nbytes: Callable[[Operation, str], int]) -> None:
        self.n = len(ops)
        self.pos = {id(op): i for i, op in enumerate(ops)}
        self.eff = dict(self.pos)  # where each op runs now: its group's first position
        self.outputs = outputs
        self.writer: dict[str, Operation] = {}
        self.size: dict[str, int] = {}
        self.readers: dict[str, list[Operation]] = {}
        for op in ops:
            for b in op.outputs:
                self.writer[b.name] = op
                self.size[b.name] = nbytes(op, b.name)
            for r in op.reads():
                self.readers.setdefault(r, []).append(op)
        self.group_of: dict[int, int] = {id(op): i for i, op in enumerate(ops)}
        self.span: dict[str, tuple[int, int] | None] = {}
        self.live = [0] * self.n
        self.unfused_peak = 0
        for name in self.writer:
            s = self._interval(name)
            self.span[name] = s
            if s is not None:
                size = self.size[name]
                self.live[s[0]:s[1] + 1] = [v + size for v in self.live[s[0]:s[1] + 1]]
        self.unfused_peak = self.peak

    @property
    def peak(self) -> int:
        return max(self.live, default=0)

    def _interval(self, name: str, eff: dict[int, int] | None = None,
                  group_of: dict[int, int] | None = None) -> tuple[int, int] | None:
        """[alloc, last use] of buffer `name` with the positions and group ids in `eff` and
        `group_of` overriding the current ones; None when it is not materialised (every reader
        is in its writer's group and it is no graph output)."""
        w = self.writer[name]
        rs = self.readers.get(name, [])
        eo = eff or {}
        go = group_of or {}
        cur_eff, cur_group = self.eff, self.group_of
        g = go.get(id(w), cur_group[id(w)])
        if name not in self.outputs and rs and all(go.get(id(r), cur_group[id(r)]) == g for r in rs):
            return None
        start = eo.get(id(w), cur_eff[id(w)])
        end = self.n - 1 if name in self.outputs else max([eo.get(id(r), cur_eff[id(r)]) for r in rs], default=start)
        return (start, max(start, end))

    def _changes(self, a: list[Operation], b: list[Operation], late: bool = False
                 ) -> tuple[dict[int, int], dict[int, int], dict[str, tuple[int, int] | None]]:
        """The effective positions, group ids and lifetimes that merging groups a and b gives,
        for the buffers whose lifetime may change (`late`: see `peak_if_merged`). Those are the
        buffers the moving group's members write or read: every member of a group runs at the
        group's position, so one of the two groups keeps its position, and a buffer only the
        staying group touches keeps its lifetime (its writer and readers stay where they run,
        and whether every reader shares the writer's group does not change when the whole
        group takes the merged group's id)."""
        members = a + b
        where = max if late else min
        first = where(self.eff[id(o)] for o in members)
        gid = self.group_of[id(a[0])]
        eff = {id(o): first for o in members}
        group_of = {id(o): gid for o in members}
        names: set[str] = set()
        for o in members:
            if self.eff[id(o)] != first:
                names.update(x.name for x in o.outputs)
                names.update(r for r in o.reads() if r in self.writer)
        return eff, group_of, {n: self._interval(n, eff, group_of) for n in names}

    def peak_if_merged(self, a: list[Operation], b: list[Operation], late: bool = False) -> int:
        """The profile's peak if groups `a` and `b` merged (see the module docstring). `late`:
        the merged group runs where its last member ran, not its first (a combo of groups whose
        outputs nothing reads waits for the last one's inputs; scheduler combo.py)."""
        _, _, spans = self._changes(a, b, late)
        delta: dict[int, int] = {}
        lo, hi = self.n, -1
        for name, new in spans.items():
            old = self.span[name]
            if old == new:
                continue
            for s, sign in ((old, -1), (new, 1)):
                if s is not None:
                    delta[s[0]] = delta.get(s[0], 0) + sign * self.size[name]
                    delta[s[1] + 1] = delta.get(s[1] + 1, 0) - sign * self.size[name]
                    lo, hi = min(lo, s[0]), max(hi, s[1])
        live = self.live
        if hi < lo:
            return max(live, default=0)
        # the change is constant between consecutive breakpoints: the peak of each segment is
        # its largest live count plus that change
        best, run = 0, 0
        cuts = sorted(delta)
        for i, t in enumerate(cuts):
            run += delta[t]
            end = cuts[i + 1] if i + 1 < len(cuts) else hi + 1
            if t <= hi and end > t:
                best = max(best, max(live[t:end]) + run)
        outside = max(max(live[:lo], default=0), max(live[hi + 1:], default=0))
        return max(best, outside)

    def merge(self, a: list[Operation], b: list[Operation], late: bool = False) -> None:
        """Record that groups `a` and `b` merged (at the last member's position with `late`)."""
        eff, group_of, spans = self._changes(a, b, late)
        self.eff.update(eff)
        self.group_of.update(group_of)
        for name, new in spans.items():
            old = self.span[name]
            if old == new:
                continue
            live, size = self.live, self.size[name]
            if old is not None:
                live[old[0]:old[1] + 1] = [v - size for v in live[old[0]:old[1] + 1]]
            if new is not None:
                live[new[0]:new[1] + 1] = [v + size for v in live[new[0]:new[1] + 1]]
            self.span[name] = new
