"""A knob whose value names a mode: parsed once, the same way for every such knob."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["OFF_WORDS", "knob_mode"]

OFF_WORDS = {"0": "off", "false": "off", "no": "off"}  # what a user writes for off


def knob_mode(name: str, value: object, modes: tuple[str, ...], aliases: Mapping[str, str] = OFF_WORDS) -> str:
    """`value` (a knob's raw setting) as one of `modes`, case and surrounding blanks ignored;
    `aliases` maps other words onto modes. ValueError naming the knob `name` for anything else."""
    raw = str(value).strip().lower()
    raw = aliases.get(raw, raw)
    if raw in modes:
        return raw
    words = ", ".join((*modes, *aliases))
    raise ValueError(f"{name}={value!r}: expected one of {words}")
