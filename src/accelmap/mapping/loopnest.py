"""A mapping: an ordered loop nest bound to memory levels, plus bypass choices.

Loops are listed outermost first and grouped by level: a level's temporal
loops, then the spatial loops of the fan-out below it, then the next level.
The tile a level holds is everything its own loops and the loops beneath
it touch. ``keep[i]`` names the operands level ``i`` keeps; an operand a
level does not keep passes through it (bypass).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Loop:
    dim: str
    bound: int
    level: int               # index into Accelerator.levels, 0 = outermost
    axis: str | None = None  # fan-out axis of a spatial loop; None = temporal

    @property
    def spatial(self) -> bool:
        return self.axis is not None


@dataclass(frozen=True)
class Mapping:
    loops: tuple[Loop, ...]
    keep: tuple[frozenset[str], ...]

    def loops_at(self, level: int) -> tuple[Loop, ...]:
        return tuple(l for l in self.loops if l.level == level)

    def dim_product(self, dim: str) -> int:
        return math.prod(l.bound for l in self.loops if l.dim == dim)

    def spatial_product(self) -> int:
        return math.prod(l.bound for l in self.loops if l.spatial)

    def temporal_product(self) -> int:
        return math.prod(l.bound for l in self.loops if not l.spatial)

    def key(self) -> tuple:
        return (self.loops, self.keep)


def loop_strides(m: Mapping) -> list[int]:
    """Step of each loop in its dimension: the product of the bounds of the later loops of that dimension."""
    strides = [1] * len(m.loops)
    seen: dict[str, int] = {}
    for i in range(len(m.loops) - 1, -1, -1):
        d = m.loops[i].dim
        strides[i] = seen.get(d, 1)
        seen[d] = strides[i] * m.loops[i].bound
    return strides
