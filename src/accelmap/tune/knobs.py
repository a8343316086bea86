"""Knob spaces: a grid of discrete schedule choices, its points and their Manhattan neighbourhoods.

A *configuration* is one option index per knob (a point of the grid); its flat index enumerates the
grid in row-major order, the last knob fastest. Two configurations are neighbours when their index
vectors differ by one in one knob (Manhattan distance 1, Rieber's dissertation, eq. 5.1): on a split
knob that is the next smaller or larger factor, on a permutation knob the next order in the list.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Knob:
    name: str
    options: tuple            # the values, in the order neighbourhoods walk them
    kind: str = "choice"      # "split" (options are factors), "permutation", "threads" or "choice"
    # the model's features of each option where not the option's own value: a loop order's permutation
    # vector (AutoTVM's ``ReorderEntity`` feature), one tuple per option, all of one length
    features: tuple | None = None

    def __post_init__(self) -> None:
        if not self.options:
            raise ValueError(f"knob {self.name!r} has no options")
        if self.features is not None and (len(self.features) != len(self.options)
                                          or len({len(f) for f in self.features}) != 1):
            raise ValueError(f"knob {self.name!r}: one feature vector of one length per option")


@dataclass(frozen=True)
class KnobSpace:
    knobs: tuple[Knob, ...]

    # Cached: the tuners ask for these once per point they touch (hundreds of thousands per tuning run).
    @cached_property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(k.options) for k in self.knobs)

    @cached_property
    def size(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def _strides(self) -> tuple[int, ...]:
        out, step = [], 1
        for n in reversed(self.shape):
            out.append(step)
            step *= n
        return tuple(reversed(out))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    def point(self, flat: int) -> tuple[int, ...]:
        if not 0 <= flat < self.size:
            raise ValueError(f"configuration index {flat} outside the space of {self.size:,}")
        return tuple((int(flat) // st) % n for st, n in zip(self._strides, self.shape, strict=True))

    def flat(self, point: tuple[int, ...]) -> int:
        if len(point) != len(self.shape) or any(not 0 <= int(v) < n for v, n in zip(point, self.shape, strict=True)):
            raise ValueError(f"configuration {point} outside the grid {self.shape}")
        return sum(int(v) * st for v, st in zip(point, self._strides, strict=True))

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

    def features(self, points: np.ndarray, permutations: bool = True) -> np.ndarray:
        """AutoTVM-style knob features (its ``get_flatten_feature``), one row per configuration: per
        knob the option's feature vector where it has one (a loop order's permutation), else its value
        (log2 of a factor: a tree model splits it as it would the factor; the index of any other
        choice). ``permutations=False``: a loop order's index instead (the protocol's first runs)."""
        cols = []
        for axis, knob in enumerate(self.knobs):
            if knob.features is not None and permutations:
                vectors = np.array(knob.features, dtype=np.float64)[points[:, axis]]
                cols.extend(vectors.T)
                continue
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


def regions(shape: tuple[int, ...], mask: np.ndarray) -> np.ndarray:
    """Connected regions of the configurations where ``mask`` (flat, row-major) holds, two configurations
    connected when at Manhattan distance 1 (the dissertation's locality analysis, Sec. 5.1.1): one label
    per configuration, the smallest flat index of its region, -1 where ``mask`` is false."""
    grid = np.asarray(mask, dtype=bool).reshape(shape)
    labels = np.where(grid, np.arange(grid.size).reshape(shape), np.iinfo(np.int64).max)
    big = np.iinfo(np.int64).max
    while True:
        new = labels.copy()
        for axis in range(len(shape)):
            for step in (1, -1):
                shifted = np.roll(labels, step, axis=axis)
                edge = [slice(None)] * len(shape)
                edge[axis] = slice(0, 1) if step == 1 else slice(-1, None)
                shifted[tuple(edge)] = big          # no wrap-around
                new = np.where(grid, np.minimum(new, shifted), big)
        if np.array_equal(new, labels):
            break
        labels = new
    return np.where(grid, labels, -1).reshape(-1)


def on_edge(shape: tuple[int, ...], mask: np.ndarray) -> np.ndarray:
    """Configurations where ``mask`` holds with at least one Manhattan neighbour where it does not:
    the edge of the valid region, where the dissertation found the best configurations."""
    grid = np.asarray(mask, dtype=bool).reshape(shape)
    edge = np.zeros_like(grid)
    for axis in range(len(shape)):
        n = shape[axis]
        if n < 2:
            continue
        lo = [slice(None)] * len(shape)
        hi = [slice(None)] * len(shape)
        lo[axis], hi[axis] = slice(0, n - 1), slice(1, n)
        differ = grid[tuple(lo)] != grid[tuple(hi)]
        edge[tuple(lo)] |= differ
        edge[tuple(hi)] |= differ
    return (edge & grid).reshape(-1)
