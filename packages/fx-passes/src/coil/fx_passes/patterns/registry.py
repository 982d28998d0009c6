"""A registry of rewrite rules: listable, countable, composable with ``+``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from coil.fx_passes.patterns.rule import Rule

__all__ = ["PatternRegistry"]


class PatternRegistry:
    """An ordered set of :class:`Rule`, keyed by name.

    Example::

        reg = PatternRegistry([rule_a]) + PatternRegistry([rule_b])
        len(reg), reg.names()  # 2, ("a", "b")
    """

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self._rules: dict[str, Rule] = {}
        for r in rules:
            self.register(r)

    def register(self, rule: Rule) -> Rule:
        """Add ``rule``. Raises ValueError when the name is taken."""
        if rule.name in self._rules:
            raise ValueError(f"rule {rule.name!r} is already registered")
        self._rules[rule.name] = rule
        return rule

    def names(self) -> tuple[str, ...]:
        return tuple(self._rules)

    def __getitem__(self, name: str) -> Rule:
        return self._rules[name]

    def __iter__(self) -> Iterator[Rule]:
        return iter(self._rules.values())

    def __len__(self) -> int:
        return len(self._rules)

    def __contains__(self, name: object) -> bool:
        return name in self._rules

    def __add__(self, other: PatternRegistry) -> PatternRegistry:
        return PatternRegistry([*self, *other])

    def __repr__(self) -> str:
        return f"PatternRegistry({list(self._rules)})"
