"""The registry's machinery: reading knobs, scoped overrides, and the process environment.

This is the only module of coil that touches the process environment. A knob's value is, in
order: an override active now (`override`, process-wide, innermost wins), else its environment
variable parsed (read on every access: nothing is cached), else its default. Code that must set a
variable (Triton reads TRITON_INTERPRET itself; a child process reads COIL_* at its start) goes
through `export`, `export_default` or `environ`, typed by knob name.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Self, TypeVar

from coil.knobs.knob import Knob

T = TypeVar("T")


class UnknownKnobError(AttributeError, KeyError):
    """A name no knob has (an attribute read or an override); the message lists the known names."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Registry:
    """Reads, overrides and exports the knobs its subclass declares as `Knob` class attributes."""

    def __init__(self) -> None:
        self._overrides: dict[str, Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def declared(cls) -> dict[str, Knob[Any]]:
        """Every knob of the class, by attribute name, in declaration order."""
        out: dict[str, Knob[Any]] = {}
        for klass in reversed(cls.__mro__):
            out.update((k, v) for k, v in vars(klass).items() if isinstance(v, Knob))
        return out

    def knob(self, name: str) -> Knob[Any]:
        """The declaration of `name`; UnknownKnobError (an AttributeError and a KeyError) naming
        the known knobs when there is none."""
        found = self.declared().get(name)
        if found is None:
            raise UnknownKnobError(f"no knob {name!r} in coil.knobs; known: {', '.join(sorted(self.declared()))}")
        return found

    def value(self, knob: Knob[T]) -> T:
        """`knob`'s value now: an override, else its environment variable parsed, else its default."""
        overrides = self._overrides
        if knob.name in overrides:
            return overrides[knob.name]  # type: ignore[no-any-return]
        if knob.env:
            raw = os.environ.get(knob.env)
            if raw is not None:
                return knob.from_text(raw)
        return knob.default_value(self)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        self.knob(name)  # raises: declared knobs never get here
        raise AssertionError(name)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self.declared()})

    @contextmanager
    def override(self, **values: object) -> Iterator[Self]:
        """Set knobs for the duration of a `with` block, then restore the previous overrides.

        Values are checked like their environment variables (`Knob.coerce`: a str is parsed as the
        variable's text; a value of the wrong type is a TypeError, one out of range a ValueError;
        None means "auto" for the knobs that have it). Overrides are process-wide (every thread
        sees them) and nest: the innermost wins. They are not seen by child processes, which read
        the environment: give those `environ(...)`.
        """
        parsed = {name: self.knob(name).coerce(value) for name, value in values.items()}
        with self._lock:
            saved = self._overrides
            self._overrides = {**saved, **parsed}
        try:
            yield self
        finally:
            with self._lock:
                self._overrides = saved

    def _texts(self, values: Mapping[str, object]) -> dict[str, str | None]:
        """environment variable -> its text for each knob value (None: unset it)."""
        out: dict[str, str | None] = {}
        for name, value in values.items():
            knob = self.knob(name)
            if not knob.env:
                raise ValueError(f"knob {name!r} has no environment variable: set it with knobs.override")
            out[knob.env] = None if value is None else knob.to_text(value)
        return out

    def environ(self, *, defaults: bool = False, **values: object) -> dict[str, str]:
        """A copy of this process's environment for a child process, with `values` (knob name ->
        value, checked as by `override`; None unsets the variable) written as their variables.

        With `defaults`, every variable of a coil knob (not the foreign ones: TRITON_INTERPRET,
        LOCAL_WORLD_SIZE, PyTorch's) is left out first, so the child sees coil's defaults except
        for `values`. Overrides active in this process are not included: pass them as `values`.
        """
        env = dict(os.environ)
        if defaults:
            for knob in self.declared().values():
                if knob.env and not knob.foreign:
                    env.pop(knob.env, None)
        for var, text in self._texts(values).items():
            if text is None:
                env.pop(var, None)
            else:
                env[var] = text
        return env

    def export(self, **values: object) -> None:
        """Set (None: unset) the environment variables of `values` in this process, for readers
        outside coil's registry: Triton reads TRITON_INTERPRET when it is imported, and child
        processes inherit the environment. Prefer `override` for coil's own reads."""
        for var, text in self._texts(values).items():
            if text is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = text

    def export_default(self, **values: object) -> None:
        """`export` for the variables that are not set yet (a value the user set wins)."""
        for var, text in self._texts(values).items():
            if text is not None:
                os.environ.setdefault(var, text)

    def replace_environ(self, env: Mapping[str, str]) -> None:
        """Make this process's environment exactly `env` (a compile worker adopting its parent's,
        so that Triton and coil read what the parent read). Nothing changes when it already is."""
        if dict(os.environ) != dict(env):
            os.environ.clear()
            os.environ.update(env)
