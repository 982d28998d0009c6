"""Typed knobs of coil.lowering_ir (environment variables `COIL_*`, read when used)."""

from __future__ import annotations

import os


def split_reduction_min() -> int:
    """COIL_SPLIT_REDUCTION_MIN (default 65536): a reduction of at least this many elements per
    row, with few rows, is split into two kernels (partials per chunk, then their reduction)."""
    raw = os.environ.get("COIL_SPLIT_REDUCTION_MIN", "65536")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"COIL_SPLIT_REDUCTION_MIN={raw!r}: expected an integer") from None


SPLIT_MAX_ROWS = 64  # only reductions with at most this many rows lack parallelism enough to split
