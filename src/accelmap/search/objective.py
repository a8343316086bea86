"""Objectives and the collections of best results a search keeps."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from accelmap.cost.model import CostResult
from accelmap.errors import SpecError
from accelmap.mapping.loopnest import Mapping

OBJECTIVES = ("energy", "latency", "edp", "pareto")


def check_objective(name: str) -> str:
    if name not in OBJECTIVES:
        raise SpecError(f"unknown objective {name!r}; choose one of {', '.join(OBJECTIVES)}", where="--objective")
    return name


def certificate_gap(value: float | None, lower_bound: float | None, proven: bool) -> float | None:
    """How far a found value may be above the optimum: value / lower bound - 1 (0 when proven)."""
    if proven:
        return 0.0
    if value is None or not lower_bound:
        return None
    return max(0.0, value / lower_bound - 1.0)


# One scalar per mapping, or per row of arrays of mappings (the batched bounds).
Value = TypeVar("Value", float, np.ndarray)


def scalar(objective: str, energy: Value, latency: Value) -> Value:
    if objective == "energy":
        return energy
    if objective == "latency":
        return latency
    return energy * latency


@dataclass(order=True)
class Found:
    value: float
    tiebreak: int
    result: CostResult = field(compare=False)
    mapping: Mapping = field(compare=False)


class TopK:
    """The k best mappings by a scalar objective; ``threshold`` prunes what cannot enter."""

    _ids = itertools.count()

    def __init__(self, objective: str, k: int):
        self.objective, self.k = objective, k
        self._heap: list = []   # max-heap via negated values

    def threshold(self) -> float:
        return -self._heap[0][0] if len(self._heap) >= self.k else float("inf")

    def prunes(self, energy_lb: float, latency_lb: float) -> bool:
        return scalar(self.objective, energy_lb, latency_lb) >= self.threshold() and len(self._heap) >= self.k

    def offer(self, result: CostResult, mapping: Mapping) -> None:
        v = scalar(self.objective, result.energy_total, result.latency)
        item = (-v, -next(self._ids), result, mapping)
        if len(self._heap) < self.k:
            heapq.heappush(self._heap, item)
        elif v < -self._heap[0][0]:
            heapq.heapreplace(self._heap, item)

    def results(self) -> list[Found]:
        return sorted(Found(-v, -t, r, m) for v, t, r, m in self._heap)


class ParetoFront:
    """Energy-latency Pareto front; prunes a node whose bound point is dominated."""

    def __init__(self):
        self.points: list[tuple[float, float, CostResult, Mapping]] = []

    def prunes(self, energy_lb: float, latency_lb: float) -> bool:
        return any(e <= energy_lb and l <= latency_lb for e, l, _, _ in self.points)

    def offer(self, result: CostResult, mapping: Mapping) -> None:
        e, l = result.energy_total, result.latency
        if self.prunes(e, l):
            return
        self.points = [p for p in self.points if not (e <= p[0] and l <= p[1])] + [(e, l, result, mapping)]

    def results(self) -> list[Found]:
        return [Found(e * l, i, r, m) for i, (e, l, r, m) in enumerate(sorted(self.points, key=lambda p: p[0]))]


def collector(objective: str, k: int):
    return ParetoFront() if objective == "pareto" else TopK(objective, k)
