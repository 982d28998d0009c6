"""One knob: a typed descriptor naming its environment variable, parser, default and meaning.

A `Knob` is declared as a class attribute of `coil.knobs.declarations.Knobs`; reading it on an
instance asks that instance for the value (`Registry.value`: an override, else the environment
variable parsed, else the default), so the rules of precedence live in one place. The parsers
below turn an environment variable's text into the knob's type and raise `ValueError` naming the
variable when the text is malformed; `Knob.coerce` checks a value given in code (an override) by
the same rules.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

if TYPE_CHECKING:
    from coil.knobs.registry import Registry

T = TypeVar("T")

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off", ""})


@dataclass(frozen=True)
class Parser(Generic[T]):
    """How one knob reads text and checks values given in code.

    `parse(variable, text)` turns an environment variable's text into the value (ValueError naming
    `variable` when malformed); `accepts` are the Python types a value given in code may have (a
    `str` for a non-`str` knob is parsed like the variable's text); `check(variable, value)`
    validates and normalises such a value; `type_name` is the type as docs/configuration.md shows
    it; `format(value)` is the text that `parse` reads back (for child processes).
    """

    type_name: str
    kind: type
    parse: Callable[[str, str], T]
    accepts: tuple[type, ...]
    check: Callable[[str, Any], T]
    format: Callable[[T], str | None]


def _parse_bool(variable: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ValueError(f"{variable}={raw!r}: expected a boolean (1/0, true/false, yes/no, on/off)")


def _format_bool(value: bool) -> str:
    return "1" if value else "0"


BOOL: Parser[bool] = Parser("bool", bool, _parse_bool, (bool,), lambda _v, x: bool(x), _format_bool)
"""1/true/yes/on or 0/false/no/off, any case, surrounding blanks ignored; empty is off."""


def _parse_auto_bool(variable: str, raw: str) -> bool | None:
    if raw.strip().lower() in ("", "auto"):
        return None
    return _parse_bool(variable, raw)


AUTO_BOOL: Parser[bool | None] = Parser(
    "auto | bool", bool, _parse_auto_bool, (bool, type(None)),
    lambda _v, x: None if x is None else bool(x),
    lambda x: None if x is None else _format_bool(x),
)
"""A boolean whose unset, empty or "auto" state is None: the reader decides."""


def int_at_least(minimum: int | None = None, empty: int | None = None, expected: str = "") -> Parser[int]:
    """An integer (`minimum` or more when given); `empty`: the value of an empty variable (else
    an empty variable is malformed); `expected`: how errors describe a valid value."""
    what = expected or ("an integer" if minimum is None else f"an integer >= {minimum}")

    def check(variable: str, value: int) -> int:
        if minimum is not None and value < minimum:
            raise ValueError(f"{variable}={value!r}: expected {what}")
        return value

    def parse(variable: str, raw: str) -> int:
        if empty is not None and not raw.strip():
            return empty
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"{variable}={raw!r}: expected {what}") from None
        if minimum is not None and value < minimum:
            raise ValueError(f"{variable}={raw!r}: expected {what}")
        return value

    name = "int" if minimum is None else f"int >= {minimum}"
    return Parser(name, int, parse, (int,), check, str)


def _parse_float(variable: str, raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise ValueError(f"{variable}={raw!r}: expected a number") from None


FLOAT: Parser[float] = Parser("float", float, _parse_float, (int, float), lambda _v, x: float(x), repr)
"""A number (an int given in code becomes a float)."""


def _parse_path(variable: str, raw: str) -> Path:
    if not raw.strip():
        raise ValueError(f"{variable} is set but empty")
    return Path(raw).expanduser()


PATH: Parser[Path] = Parser(
    "path", Path, _parse_path, (str, os.PathLike), lambda v, x: _parse_path(v, os.fspath(x)), str,
)
"""A directory or file; `~` expands; an empty variable is malformed."""

STR: Parser[str] = Parser("str", str, lambda _v, raw: raw, (str, os.PathLike),
                          lambda _v, x: os.fspath(x), lambda x: x)
"""Text, taken as it is (its reader gives it meaning and rejects what it cannot use)."""


def _parse_count(_variable: str, raw: str) -> int | None:
    value = raw.strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


COUNT: Parser[int | None] = Parser(
    "int > 0 | unset", int, _parse_count, (int, type(None)),
    lambda v, x: None if x is None else int_at_least(1).check(v, x),
    lambda x: None if x is None else str(x),
)
"""A positive count another tool sets (torchrun's LOCAL_WORLD_SIZE); anything else reads None."""


class Knob(Generic[T]):
    """One setting. Read it on the registry instance (`knobs.fusion`); on the class it is this
    declaration (`Knobs.fusion.env`).

    Attributes:
        name: the attribute name, unique across coil (set when the class is created).
        env: the environment variable it reads; "" for a setting only code can change
            (`knobs.override`), which no environment variable reaches.
        parser: type, parsing and validation (see `Parser`).
        default: the value when neither an override nor the variable sets it: a value, or a
            function of the registry computing it when read.
        default_doc: the default as docs/configuration.md shows it.
        meaning: one line: the rule the knob sets.
        owner: the coil package that reads it (`coil.backend`, `coil.runtime`, ...).
        foreign: the variable belongs to another tool (Triton, PyTorch, a launcher); coil reads
            it and documents it apart.
    """

    def __init__(self, env: str, parser: Parser[T], default: T | Callable[[Registry], T], *, owner: str,
                 meaning: str, default_doc: str | None = None, foreign: bool = False) -> None:
        self.name = ""
        self.env = env
        self.parser = parser
        self.default = default
        self.default_doc = default_doc if default_doc is not None else _doc_of(parser, default)
        self.meaning = meaning
        self.owner = owner
        self.foreign = foreign

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Knob({self.name!r}, env={self.env!r}, type={self.type_name!r}, owner={self.owner!r})"

    @property
    def type_name(self) -> str:
        return self.parser.type_name

    @property
    def kind(self) -> type:
        """The Python type of a set value (`bool`, `int`, `float`, `str`, `Path`)."""
        return self.parser.kind

    @property
    def variable(self) -> str:
        """The name errors use: the environment variable, or the attribute of an override-only knob."""
        return self.env or self.name

    def default_value(self, registry: Registry) -> T:
        """The default, computed now when it is a function."""
        if callable(self.default):
            return self.default(registry)  # type: ignore[no-any-return]
        return self.default

    def from_text(self, raw: str) -> T:
        """The value of the environment variable's text `raw` (ValueError naming the variable)."""
        return self.parser.parse(self.variable, raw)

    def coerce(self, value: object) -> T:
        """A value given in code, checked like the variable: a `str` for a non-`str` knob is parsed
        as the variable's text; otherwise it must be of an accepted type (TypeError naming the knob;
        a bool is never a number) and pass the knob's range (ValueError)."""
        parser = self.parser
        if isinstance(value, str) and str not in parser.accepts:
            return parser.parse(self.variable, value)
        numeric = parser.kind in (int, float)
        if not isinstance(value, parser.accepts) or (numeric and isinstance(value, bool)):
            raise TypeError(f"knob {self.name!r} ({self.variable}) takes a {parser.type_name}, "
                            f"got {value!r} ({type(value).__name__})")
        return parser.check(self.variable, value)

    def to_text(self, value: object) -> str | None:
        """The variable's text for `value` (None: leave the variable unset), checked first."""
        return self.parser.format(self.coerce(value))

    @overload
    def __get__(self, obj: None, owner: type) -> Knob[T]: ...
    @overload
    def __get__(self, obj: Registry, owner: type) -> T: ...
    def __get__(self, obj: Registry | None, owner: type) -> T | Knob[T]:
        if obj is None:
            return self
        return obj.value(self)


def _doc_of(parser: Parser[Any], default: object) -> str:
    if callable(default):
        return "(computed)"
    if default is None:
        return "(unset: auto)"
    if default == "":
        return "(empty)"
    text = parser.format(default)
    return "(unset)" if text is None else text
