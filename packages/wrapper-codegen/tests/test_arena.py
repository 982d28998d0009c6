"""Arenas: the plan's packing checked by brute force, the wrapper's Place lines at the plan's
offsets, and programs with arenas computing what eager computes."""

from __future__ import annotations

import random
from typing import Any

import coil.lowering_ir as L
import coil.wrapper_codegen.plan as plan_module
import pytest
import sympy
import torch
from coil.scheduler.ordering import step_reads, step_writes
from coil.wrapper_codegen import (
    ALIGNMENT,
    Allocate,
    Arena,
    ArenaBuffer,
    KernelCall,
    KernelLaunch,
    Place,
    Reuse,
    arena_view,
    build,
    emit_fx,
    plan_arenas,
)

F = torch.nn.functional


def _overlapping_pairs(buffers: list[ArenaBuffer], offsets: dict[str, int]) -> list[tuple[str, str]]:
    """Brute force: pairs live at one step whose byte ranges intersect."""
    bad = []
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            in_time = a.first <= b.last and b.first <= a.last
            in_memory = offsets[a.name] < offsets[b.name] + b.nbytes and offsets[b.name] < offsets[a.name] + a.nbytes
            if in_time and in_memory and a.nbytes and b.nbytes:
                bad.append((a.name, b.name))
    return bad


@pytest.mark.parametrize("seed", range(20))
def test_random_plans_never_share_bytes_between_live_buffers(seed: int) -> None:
    rng = random.Random(seed)
    devices = [torch.device("cpu"), torch.device("meta")]
    buffers = []
    for k in range(rng.randint(1, 40)):
        first = rng.randint(0, 30)
        buffers.append(ArenaBuffer(f"b{k}", rng.choice([1, 4, 100, 1000, 4096, 10**5]), first,
                                   first + rng.randint(0, 8), rng.choice(devices), torch.float32))
    plans = plan_arenas(buffers)
    placed = [name for p in plans for name in p.offsets]
    assert len(placed) == len(set(placed))  # a buffer is in one arena at most
    for p in plans:
        mine = [b for b in buffers if b.name in p.offsets]
        assert all(str(b.device) == str(p.device) for b in mine)
        assert not _overlapping_pairs(mine, p.offsets)
        assert all(off % ALIGNMENT == 0 for off in p.offsets.values())
        assert p.nbytes % ALIGNMENT == 0 and p.nbytes >= max(p.offsets[b.name] + b.nbytes for b in mine)
        steps = range(max(b.last for b in mine) + 1)  # the most bytes live at one step, by brute force
        assert p.nbytes >= p.lower_bound == max(sum(b.nbytes for b in mine if b.first <= t <= b.last) for t in steps)
        assert (p.first, p.last) == (min(b.first for b in mine), max(b.last for b in mine))


def test_windows_end_where_their_peak_has_passed() -> None:
    cpu = torch.device("cpu")
    big = ArenaBuffer("big", 1 << 20, 0, 2, cpu, torch.float32)  # a large scratch buffer, early
    small = [ArenaBuffer(f"s{k}", 4096, 3 + k, 4 + k, cpu, torch.float32) for k in range(6)]
    bridge = ArenaBuffer("bridge", 256, 1, 8, cpu, torch.float32)  # a small buffer read much later
    plans = plan_arenas([big, *small, bridge])
    by_buffer = {b: p for p in plans for b in p.offsets}
    assert "bridge" not in by_buffer  # it crosses the cut after the big buffer's window
    assert by_buffer["big"].last == 2 and by_buffer["big"].nbytes == 1 << 20
    later = {by_buffer[b.name].name for b in small}
    assert by_buffer["big"].name not in later
    assert all(by_buffer[b.name].nbytes <= 2 * 4096 for b in small)  # never as large as the early one


GRAPHS = {
    # a chain whose intermediates die one after another: they share bytes of the arena
    "chain": (lambda x: ((((x + 1).t().contiguous() * 2).t().contiguous().exp().t().contiguous() + 3).sum(0),),
              lambda: (torch.randn(16, 16),)),
    # several dtypes in one arena, a reduction, an extern between kernels
    "mixed": (lambda x, w: ((torch.softmax(x @ w, -1) > 0.2).sum(1), F.layer_norm(x, (6,)).half().float() @ w),
              lambda: (torch.randn(5, 6), torch.randn(6, 6))),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_arena_programs_match_eager(wr: Any, name: str) -> None:
    fn, make = GRAPHS[name]
    torch.manual_seed(0)
    _, prog = wr.check(fn, *make(), arena=True, fusion=False)
    assert prog.arenas, "some kernel store should be placed"


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_places_are_the_plans_offsets_and_only_internal_static_stores(wr: Any, name: str) -> None:
    fn, make = GRAPHS[name]
    s = wr.schedule(fn, *make(), fusion=False)
    prog = wr.program(s, arena=True)
    places = {ln.name: ln for ln in prog.lines if isinstance(ln, Place)}
    arenas = {ln.name: ln for ln in prog.lines if isinstance(ln, Arena)}
    assert set(arenas) == {a.name for a in prog.arenas}
    for a in prog.arenas:
        assert arenas[a.name].nbytes == a.nbytes
        for b, off in a.offsets.items():
            assert places[b].arena == a.name and places[b].offset == off
    assert set(places) == {b for a in prog.arenas for b in a.offsets}
    stores = {w for k in s.kernels() for w in k.stores}
    returned = {o.storage.name for o in s.graph.outputs if hasattr(o, "storage")}
    assert places and set(places) <= stores - returned
    allocated = {ln.name for ln in prog.lines if isinstance(ln, Allocate)}
    assert not allocated & set(places)


@pytest.fixture
def no_inplace_pointwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels do not write over what they read: the chain's intermediates then each need storage
    (in place, each would take its predecessor's, and the arena would hold one buffer)."""
    monkeypatch.setattr(plan_module, "inplace_pointwise", lambda *args: {})


@pytest.mark.usefixtures("no_inplace_pointwise")
def test_arena_lives_from_its_first_buffer_to_its_last_ones_last_step(wr: Any) -> None:
    fn, make = GRAPHS["chain"]
    s = wr.schedule(fn, *make(), fusion=False)
    prog = wr.program(s, arena=True)
    (a,) = prog.arenas
    step_of_line: list[int] = []
    step = -1
    for ln in prog.lines:
        step_of_line.append(step)
        if isinstance(ln, KernelCall):
            step += 1
    at = {type(ln).__name__ + ":" + getattr(ln, "name", ""): step_of_line[i] for i, ln in enumerate(prog.lines)}
    assert at[f"Arena:{a.name}"] == a.first - 1  # made just before the first placed buffer's step
    assert at[f"Free:{a.name}"] == a.last  # freed right after the last one's last step
    assert all(at[f"Free:{arena_view(a.name, d)}"] == a.last for d in a.dtypes)
    # the chain's intermediates die one after another: the arena is smaller than their sum
    sizes = {b: int(s.graph.buffers()[b].layout.storage_extent()) * 4 for b in a.offsets}
    assert a.nbytes < sum(max(n, ALIGNMENT) for n in sizes.values())
    assert len(a.offsets) >= 3


def test_arena_peak_delta_counts_the_arena_whole_over_its_span(wr: Any) -> None:
    fn, make = GRAPHS["mixed"]
    s = wr.schedule(fn, *make(), fusion=False)
    with_arena, without = wr.program(s, arena=True), wr.program(s)
    assert with_arena.arena_peak_delta >= 0
    # the reuse plan's peak counts every storage; the arena replaces its buffers by itself
    assert without.reuse is not None and with_arena.reuse is not None
    placed = {b for a in with_arena.arenas for b in a.offsets}
    assert placed and not placed & set(with_arena.reuse.storage)


def test_in_place_scatter_keeps_its_base_placed_until_the_output_dies(wr: Any) -> None:
    def fn(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return ((torch.index_put(torch.exp(x), (i,), v, True) * 3).sum(0),)

    s = wr.schedule(fn, torch.randn(10, 3), torch.tensor([0, 4, 4, 9]), torch.randn(4, 3), fusion=False)
    launches = wr.launches_for(s)
    (st,) = [st for st in s.steps if isinstance(st, L.Scatter)]
    for part in ("init", "scatter"):
        launches[f"{st.name}_{part}"] = KernelLaunch(f"{st.name}_{part}", (), (1,), sympy.Integer(1))
    prog = build(s, launches, arena=True)
    base, out = st.base.name, st.output.name
    (a,) = prog.arenas
    assert base in a.offsets and out not in a.offsets  # one block: the base's storage
    (reuse,) = [ln for ln in prog.lines if isinstance(ln, Reuse) and ln.name == out]
    assert reuse.donor == base
    last_read = max(i for i, step in enumerate(s.steps) if out in step_reads(step))
    other = [b for b in a.offsets if b != base]
    # a buffer placed at the base's bytes may only start after the scatter output's last read
    for b in other:
        first = next(i for i, step in enumerate(s.steps) if b in step_writes(step))
        lo, hi = a.offsets[b], a.offsets[b] + s.graph.buffers()[b].nbytes_expr
        overlaps = lo < a.offsets[base] + s.graph.buffers()[base].nbytes_expr and a.offsets[base] < hi
        assert not overlaps or first > last_read


def test_no_arena_when_an_extern_cannot_be_captured(wr: Any) -> None:
    # nonzero's size is data-dependent: a capture blocker, so the program may be cut into segments
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return ((x.exp() + 1).nonzero().sum(0),)

    s = wr.schedule(fn, torch.randn(6))
    prog = wr.program(s, arena=True)
    assert prog.blockers  # nonzero's extern
    assert not prog.arenas
    assert not any(isinstance(ln, Arena | Place) for ln in prog.lines)
    # a graph with internal buffers and no blocker does get an arena
    chain, make = GRAPHS["chain"]
    assert wr.program(wr.schedule(chain, *make(), fusion=False), arena=True).arenas


def test_fx_emitter_runs_arena_programs_like_python(wr: Any) -> None:
    fn, make = GRAPHS["mixed"]
    torch.manual_seed(0)
    inputs = make()
    s = wr.schedule(fn, *inputs, fusion=False)
    call, _, prog, kernels = wr.compile(s, arena=True)
    want = call(list(inputs))
    gm = emit_fx(prog.lines, kernels, prog.constants)
    got = gm(*inputs)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    assert any(n.name == prog.arenas[0].name for n in gm.graph.nodes)
