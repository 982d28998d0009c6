"""Typed configuration of coil.fx_passes, read from ``COIL_*`` environment variables.

This is the only module of the package that reads ``os.environ``. Every knob is a typed
descriptor on :class:`FxPassesKnobs`; the process-wide instance is :data:`knobs`.
:meth:`FxPassesKnobs.override` scopes a change (tests use it; overrides nest and are undone on
exit, also on error).

Knobs:
    verify (``COIL_VERIFY``, default off): run the invariant verifier after every pass.
    reinplace (``COIL_REINPLACE``, default off): let the post-grad pipeline end with the
        reinplacing pass (only when lowering handles mutation).
    pad_mm (``COIL_PAD_MM``, default on): pad unaligned matmul rows to 16 bytes on CUDA
        (:mod:`coil.fx_passes.passes.pad_mm`).
    channels_last (``COIL_CHANNELS_LAST``, default unset = auto): channels-last layouts for
        convolution graphs (:mod:`coil.fx_passes.passes.channels_last`). Auto (``None``): on
        for CUDA graphs whose 4-D convolutions run in bf16/fp16; ``1`` forces it on for every
        device and floating dtype (CPU tests); ``0`` turns it off.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar, overload

__all__ = ["FxPassesKnobs", "knobs"]

_T = TypeVar("_T")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def _parse_bool(env: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{env}={raw!r}: expected one of 1/0, true/false, yes/no, on/off")


class _EnvBool(Generic[_T]):
    """A boolean knob: an override if one is active, else the environment, else the default."""

    def __init__(self, env: str, default: bool) -> None:
        self.env = env
        self.default = default
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _EnvBool[_T]: ...
    @overload
    def __get__(self, obj: FxPassesKnobs, owner: type) -> bool: ...
    def __get__(self, obj: FxPassesKnobs | None, owner: type) -> bool | _EnvBool[_T]:
        if obj is None:
            return self
        if self.name in obj._overrides:
            return bool(obj._overrides[self.name])
        raw = os.environ.get(self.env)
        return self.default if raw is None else _parse_bool(self.env, raw)


class _EnvAutoBool(Generic[_T]):
    """A boolean knob whose unset state means "decide automatically": ``None``."""

    def __init__(self, env: str) -> None:
        self.env = env
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _EnvAutoBool[_T]: ...
    @overload
    def __get__(self, obj: FxPassesKnobs, owner: type) -> bool | None: ...
    def __get__(self, obj: FxPassesKnobs | None, owner: type) -> bool | _EnvAutoBool[_T] | None:
        if obj is None:
            return self
        if self.name in obj._overrides:
            value = obj._overrides[self.name]
            return None if value is None else bool(value)
        raw = os.environ.get(self.env)
        if raw is None or raw.strip().lower() in ("", "auto"):
            return None
        return _parse_bool(self.env, raw)


class FxPassesKnobs:
    """The knobs of coil.fx_passes (see the module docstring)."""

    verify = _EnvBool[bool]("COIL_VERIFY", default=False)
    reinplace = _EnvBool[bool]("COIL_REINPLACE", default=False)
    pad_mm = _EnvBool[bool]("COIL_PAD_MM", default=True)
    channels_last = _EnvAutoBool[bool]("COIL_CHANNELS_LAST")

    def __init__(self) -> None:
        self._overrides: dict[str, Any] = {}

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The knob names, in declaration order."""
        return tuple(k for k, v in vars(cls).items() if isinstance(v, _EnvBool | _EnvAutoBool))

    @contextmanager
    def override(self, **values: bool | None) -> Iterator[None]:
        """Set knobs for the duration of a ``with`` block (``None``: "auto", for the knobs that
        have it).

        Raises:
            TypeError: a name that is not a knob, or a value that is not a bool.
        """
        for name, value in values.items():
            if name not in self.names():
                raise TypeError(f"unknown fx-passes knob {name!r}; known: {self.names()}")
            if value is None and isinstance(vars(type(self))[name], _EnvAutoBool):
                continue
            if not isinstance(value, bool):
                raise TypeError(f"knob {name!r} takes a bool, got {value!r}")
        saved = dict(self._overrides)
        self._overrides.update(values)
        try:
            yield
        finally:
            self._overrides = saved


knobs = FxPassesKnobs()
