"""Artefact logging: `COIL_LOGS=graph,fusion,...` logs each artefact at INFO on `coil.<artefact>`.

Artefacts: graph (the FX graph after each post-grad pass), fusion (every fusion attempt, with the
reason a pair was not fused), kernels (Triton source), wrapper (the Python wrapper), memory_plan
(buffer lifetimes and reuse), compile_time (seconds per compile stage of each graph, and whether the
graph cache was hit), autotune (each tuned kernel's candidate configurations, their times and the
one kept: COIL_AUTOTUNE). `all` selects every one. Selecting an artefact sets its logger to
INFO and, when the `coil` logger has no handler of its own, adds one stderr handler to it, so
the artefact shows without further logging setup.
"""

from __future__ import annotations

import logging

from coil.knobs import knobs

ARTEFACTS = ("graph", "fusion", "kernels", "wrapper", "memory_plan", "compile_time", "autotune")

_handler: logging.Handler | None = None


def selected() -> frozenset[str]:
    """The artefacts `COIL_LOGS` selects.

    Raises:
        ValueError: an unknown artefact name (the message lists the known ones).
    """
    names = {n.strip() for n in str(knobs.logs).split(",") if n.strip()}
    if "all" in names:
        return frozenset(ARTEFACTS)
    unknown = names - set(ARTEFACTS)
    if unknown:
        raise ValueError(f"COIL_LOGS: unknown artefact(s) {sorted(unknown)}; known: {', '.join(ARTEFACTS)}, all")
    return frozenset(names)


def artefact_logger(name: str) -> logging.Logger | None:
    """The logger for artefact `name` when COIL_LOGS selects it (set up to show INFO), else None."""
    if name not in selected():
        return None
    logger = logging.getLogger(f"coil.{name}")
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    _ensure_handler()
    return logger


def emit(name: str, title: str, text: str) -> None:
    """Log `text` (an artefact's dump) under `title` when COIL_LOGS selects `name`."""
    logger = artefact_logger(name)
    if logger is not None:
        logger.info("%s\n%s", title, text.rstrip("\n"))


def _ensure_handler() -> None:
    global _handler
    root = logging.getLogger("coil")
    if _handler is not None or root.handlers:
        return
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    root.addHandler(_handler)
