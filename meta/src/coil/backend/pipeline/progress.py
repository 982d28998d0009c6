"""A progress bar while a graph's kernels compile: only on a TTY, only when tqdm is installed.

tqdm is optional (coil does not depend on it); it is looked up with importlib when a graph has
kernels to compile. With a bar, kernels are compiled in chunks of COIL_COMPILE_WORKERS (or, with
workers off, COIL_COMPILE_THREADS; each chunk still compiles in parallel) so the bar can advance
between chunks.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

import torch
from coil.knobs import knobs
from coil.runtime import KernelSpec, compile_kernels


def _tqdm() -> Any:
    try:
        return importlib.import_module("tqdm").tqdm
    except ImportError:
        return None


def progress_bar(total: int, title: str) -> Any:
    """A tqdm bar on stderr, or None (no TTY, COIL_PROGRESS=0, fewer than 2 kernels, no tqdm)."""
    if total < 2 or not knobs.progress or not sys.stderr.isatty():
        return None
    tqdm = _tqdm()
    if tqdm is None:
        return None
    return tqdm(total=total, desc=f"coil: compiling {title}", unit="kernel", leave=False, file=sys.stderr)


def compile_with_progress(specs: Sequence[KernelSpec], device: torch.device, title: str) -> dict[str, Any]:
    """`coil.runtime.compile_kernels(specs, device)`, with a progress bar when one can be shown."""
    bar = progress_bar(len(specs), title)
    if bar is None:
        return compile_kernels(specs, device)
    chunk = max(1, int(knobs.compile_workers or knobs.compile_threads))
    out: dict[str, Any] = {}
    try:
        for i in range(0, len(specs), chunk):
            part = specs[i:i + chunk]
            out.update(compile_kernels(part, device))
            bar.update(len(part))
    finally:
        bar.close()
    return out
