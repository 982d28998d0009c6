"""Strided layouts with sympy sizes and strides."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import sympy
import torch

Expr: TypeAlias = sympy.Expr


def as_expr(value: object) -> Expr:
    """A size, stride or offset (int, SymInt or sympy) as a sympy expression."""
    if isinstance(value, sympy.Expr):
        return value
    if isinstance(value, torch.SymInt | torch.SymFloat):
        return sympy.sympify(value.node.expr)
    if isinstance(value, int):
        return sympy.Integer(value)
    raise TypeError(f"not a size: {value!r}")


def contiguous_strides(size: Sequence[Expr]) -> tuple[Expr, ...]:
    """Row-major strides for `size`."""
    strides: list[Expr] = []
    acc: Expr = sympy.Integer(1)
    for s in reversed(size):
        strides.append(acc)
        acc = acc * s
    return tuple(reversed(strides))


@dataclass(frozen=True)
class Layout:
    """Where the elements of a tensor sit in its storage.

    `offset` is counted in elements from the start of the *owning buffer* (for a graph input: from
    its data pointer), never from the start of the underlying torch storage.
    """

    device: torch.device
    dtype: torch.dtype
    size: tuple[Expr, ...]
    stride: tuple[Expr, ...]
    offset: Expr = sympy.S.Zero

    def __post_init__(self) -> None:
        if len(self.size) != len(self.stride):
            raise ValueError(f"size {self.size} and stride {self.stride} differ in rank")

    @property
    def numel(self) -> Expr:
        return sympy.Mul(*self.size) if self.size else sympy.Integer(1)

    def index(self, idx: Sequence[Expr]) -> Expr:
        """Storage index (in elements) of the element at logical position `idx`."""
        if len(idx) != len(self.size):
            raise ValueError(f"index of rank {len(idx)} into layout of rank {len(self.size)}")
        return self.offset + sum((i * s for i, s in zip(idx, self.stride, strict=True)), sympy.Integer(0))

    def storage_extent(self) -> Expr:
        """Elements the owning buffer must hold: 1 + the largest index reached (0 if empty).

        With symbolic sizes the tensor may be empty at run time (a slice past the end): the
        extent is then at least 0, never the negative value the formula gives for a size of 0.
        """
        if any(s == 0 for s in self.size):
            return sympy.Integer(0)
        reach = self.offset + 1 + sum(((n - 1) * st for n, st in zip(self.size, self.stride, strict=True)),
                                      sympy.Integer(0))
        if all(isinstance(n, sympy.Integer | int) for n in self.size):
            return sympy.sympify(reach)
        return sympy.Max(0, reach)

    @staticmethod
    def from_tensor(t: torch.Tensor, base_offset: int = 0) -> Layout:
        """Layout of a (fake) tensor; `base_offset` is the storage offset of its owning buffer."""
        return Layout(
            device=t.device,
            dtype=t.dtype,
            size=tuple(as_expr(s) for s in t.shape),
            stride=tuple(as_expr(s) for s in t.stride()),
            offset=as_expr(t.storage_offset()) - base_offset,
        )
