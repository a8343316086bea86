"""Knob spaces: a grid of discrete schedule choices, its points and their Manhattan neighbourhoods.

A *configuration* is one option index per knob (a point of the grid); its flat index enumerates the
grid in row-major order, the last knob fastest. Two configurations are neighbours when their index
vectors differ by one in one knob (Manhattan distance 1, Rieber's dissertation, eq. 5.1): on a split
knob that is the next smaller or larger factor, on a permutation knob the next order in the list.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Knob:
    name: str
    options: tuple            # the values, in the order neighbourhoods walk them
    kind: str = "choice"      # "split" (options are factors), "permutation", "threads" or "choice"

    def __post_init__(self) -> None:
        if not self.options:
            raise ValueError(f"knob {self.name!r} has no options")


@dataclass(frozen=True)
class KnobSpace:
    knobs: tuple[Knob, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(k.options) for k in self.knobs)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    def point(self, flat: int) -> tuple[int, ...]:
        return tuple(int(v) for v in np.unravel_index(flat, self.shape))

    def flat(self, point: tuple[int, ...]) -> int:
        return int(np.ravel_multi_index(point, self.shape))

    def all_points(self) -> np.ndarray:
        """Every configuration's option indices, one row per flat index."""
        grids = np.indices(self.shape).reshape(len(self.shape), -1)
        return grids.T.astype(np.int64)

    def values(self, point: tuple[int, ...]) -> dict[str, Any]:
        return {k.name: k.options[i] for k, i in zip(self.knobs, point, strict=True)}

    def neighbours(self, point: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Points at Manhattan distance 1 inside the grid."""
        out = []
        for axis, n in enumerate(self.shape):
            for step in (-1, 1):
                v = point[axis] + step
                if 0 <= v < n:
                    out.append(point[:axis] + (v,) + point[axis + 1:])
        return out

    def features(self, points: np.ndarray) -> np.ndarray:
        """AutoTVM-style knob features: the option value of each knob (log2 of a factor, the index of
        a permutation), one row per configuration."""
        cols = []
        for axis, knob in enumerate(self.knobs):
            if knob.kind in ("split", "threads"):
                table = np.log2(np.array(knob.options, dtype=np.float64))
            else:
                table = np.arange(len(knob.options), dtype=np.float64)
            cols.append(table[points[:, axis]])
        return np.stack(cols, axis=1) if cols else np.zeros((len(points), 0))

    def describe(self) -> str:
        parts = [f"{k.name}[{len(k.options)}]" for k in self.knobs]
        return f"{self.size:,} configurations: " + " x ".join(parts)


def manhattan(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Manhattan distances between the rows of ``a`` and the rows of ``b`` (a matrix)."""
    return np.abs(a[:, None, :] - b[None, :, :]).sum(axis=2)


def divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))
