"""MergeDag: the rank-bounded cycle check against a brute-force search, on random DAGs merged at random."""

from __future__ import annotations

import random

import pytest
from coil.scheduler.merge_dag import MergeDag


def _path_through_third(preds: dict[int, set[int]], a: int, b: int) -> bool:
    """The oracle (fusion's search before ranks): a path s -> x -> ... -> d, x neither a nor b,
    either way, by an unbounded backward search from d."""
    for s, d in ((a, b), (b, a)):
        stack = [p for p in preds[d] if p != s]
        seen: set[int] = set()
        while stack:
            g = stack.pop()
            if g == s:
                return True
            if g not in seen:
                seen.add(g)
                stack.extend(preds[g])
    return False


def _merge(preds: dict[int, set[int]], keep: int, drop: int) -> None:
    preds[keep] = (preds[keep] | preds.pop(drop)) - {keep, drop}
    for ps in preds.values():
        if drop in ps:
            ps.discard(drop)
            ps.add(keep)


def _random_dag(rng: random.Random, n: int, p: float) -> dict[int, set[int]]:
    """n groups; an edge i -> j (i < j in a random permutation) with probability p."""
    perm = list(range(n))
    rng.shuffle(perm)
    return {perm[j]: {perm[i] for i in range(j) if rng.random() < p} for j in range(n)}


def _check_topological(dag: MergeDag) -> None:
    order = dag.order()
    assert sorted(order) == sorted(dag.preds)
    at = {g: i for i, g in enumerate(order)}
    assert all(at[p] < at[g] for g, ps in dag.preds.items() for p in ps)


@pytest.mark.parametrize("seed", range(40))
def test_cycle_check_matches_brute_force_over_random_merges(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 40)
    preds = _random_dag(rng, n, rng.choice([0.05, 0.15, 0.4]))
    if seed % 2:  # keys in a topological order (taken as given); else shuffled (one is computed)
        preds = {g: preds[g] for g in sorted(preds, key=lambda g: len(_ancestors(preds, g)))}
    oracle = {g: set(ps) for g, ps in preds.items()}
    dag = MergeDag(preds)
    _check_topological(dag)
    for _ in range(4 * n):
        if len(oracle) < 2:
            break
        a, b = rng.sample(sorted(oracle), 2)
        cycle = _path_through_third(oracle, a, b)
        assert dag.creates_cycle(a, b) == cycle, (a, b)
        if cycle:
            continue
        keep = rng.choice((a, b))
        dag.merge(a, b, keep)
        _merge(oracle, keep, b if keep == a else a)
        assert dag.preds == oracle
        _check_topological(dag)


def _ancestors(preds: dict[int, set[int]], g: int) -> set[int]:
    out: set[int] = set()
    stack = list(preds[g])
    while stack:
        p = stack.pop()
        if p not in out:
            out.add(p)
            stack.extend(preds[p])
    return out


def test_path_through_a_merged_group_is_found() -> None:
    # 0 -> 1 -> 2 and 0 -> 2: merging 0 and 2 would make {0, 2} feed 1 and read it
    dag = MergeDag({0: set(), 1: {0}, 2: {0, 1}})
    assert dag.creates_cycle(0, 2) and dag.creates_cycle(2, 0)
    assert not dag.creates_cycle(0, 1)
    dag.merge(0, 1, 0)
    assert dag.preds == {0: set(), 2: {0}}
    assert not dag.creates_cycle(0, 2)


def test_cycle_in_the_dependencies_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="dependency cycle"):
        MergeDag({0: {1}, 1: {0}})
