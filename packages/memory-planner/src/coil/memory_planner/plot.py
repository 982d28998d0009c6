"""Memory timeline plot (PNG): live bytes over time, the largest buffers drawn as bands.

Needs matplotlib, from the optional extra: ``pip install coil-memory-planner[plot]``. It is
imported only inside :func:`timeline_png`, so importing this package never needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from coil.memory_planner.arena import Block

__all__ = ["timeline_png", "timeline_series"]


def timeline_series(
    blocks: Sequence[Block], bands: int = 8
) -> tuple[list[int], dict[str, list[int]]]:
    """The data of the plot: time steps and, per band, live bytes at each step.

    The ``bands`` largest blocks (by size x lifetime) get a band each; every other block is
    summed into the band ``"other"``. Bands sum to the total live bytes at each step.
    """
    if not blocks:
        return [], {}
    t0 = min(b.lower for b in blocks)
    t1 = max(b.upper for b in blocks)
    steps = list(range(t0, t1))
    big = sorted(blocks, key=lambda b: (-b.size * (b.upper - b.lower), b.id))[:bands]
    series: dict[str, list[int]] = {b.id: [0] * len(steps) for b in big}
    other = [0] * len(steps)
    names = {b.id for b in big}
    for b in blocks:
        row = series[b.id] if b.id in names else other
        for t in range(b.lower, b.upper):
            row[t - t0] += b.size
    if any(other):
        series["other"] = other
    return steps, series


def timeline_png(
    blocks: Sequence[Block], path: str | Path, *, bands: int = 8, title: str = "live bytes"
) -> None:
    """Write a stacked-area PNG of live bytes per time step to ``path``.

    Raises:
        ImportError: matplotlib is missing; the message says to install
            ``coil-memory-planner[plot]``.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(
            "timeline_png needs matplotlib: pip install 'coil-memory-planner[plot]'"
        ) from e
    steps, series = timeline_series(blocks, bands)
    fig, ax = plt.subplots(figsize=(10, 4))
    if steps:
        ax.stackplot(steps, *series.values(), labels=list(series), step="post")
        ax.legend(loc="upper right", fontsize="small")
    ax.set_xlabel("step")
    ax.set_ylabel("bytes")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(str(path), format="png")
    plt.close(fig)
