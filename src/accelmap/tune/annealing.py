"""Simulated annealing over a knob grid to find the configurations a cost model scores highest.

This is AutoTVM's ``SimulatedAnnealingOptimizer`` (Chen et al., "Learning to Optimize Tensor
Programs", NeurIPS 2018): ``parallel_size`` chains; each step moves every chain by a random walk (one
random knob set to another random option), accepts with probability ``exp(min((new - old) / t, 1))``
under a temperature cooled linearly from 1 to 0 over ``n_iter`` steps, and keeps a heap of the ``num``
best-scored points not yet measured; it stops ``early_stop`` steps after the heap last changed. Chains
persist from one call to the next. Points scored below ``min_score`` (0, as in AutoTVM) are not
returned; the caller fills its batch with random points.

The score of a point is the model's prediction plus a per-point ``bias`` (the dissertation's biased
SA: -1e6 for configurations known to be invalid, +1 for those known to be valid). When the space is
small enough, the model is evaluated once on every point and the walk reads the table: the same
walk, without a model call per step.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable

import numpy as np

from accelmap.tune.knobs import KnobSpace

TABLE_MAX_POINTS = 200_000   # spaces up to this size are scored once, in one model call


@dataclass(frozen=True)
class AnnealingSettings:
    parallel_size: int = 128
    n_iter: int = 500
    early_stop: int = 50
    temp_start: float = 1.0
    temp_end: float = 0.0
    # AutoTVM's SA returns only points scored at least 0 (the rest of a batch is then drawn at random);
    # None returns the best ``num`` whatever their sign (a variant measured in the tuning benchmark).
    min_score: float | None = 0.0
    uniform_knobs: bool = False


class Annealer:
    def __init__(self, space: KnobSpace, settings: AnnealingSettings, rng: np.random.Generator):
        self.space = space
        self.settings = settings
        self.rng = rng
        self.shape = np.array(space.shape, dtype=np.int64)
        self.chains: np.ndarray | None = None
        # AutoTVM's knob weights; ``uniform_knobs`` (the walk of the protocol's first runs) draws every
        # knob alike, and a knob with one option then leaves the point where it is
        w = (self.shape - 1) / self.shape if not settings.uniform_knobs else np.ones(len(self.shape))
        self.walk_weights = w / w.sum() if w.sum() > 0 else None

    def _random_points(self, n: int) -> np.ndarray:
        return np.stack([self.rng.integers(0, s, size=n) for s in self.shape], axis=1).astype(np.int64)

    def _walk(self, points: np.ndarray) -> np.ndarray:
        """Every point moved by AutoTVM's ``random_walk``: it draws a knob and a value uniformly until the
        value differs from the point's, so a knob of d options is changed with weight (d - 1) / d (a
        knob with one option never) and then to one of its other options, uniformly."""
        new = points.copy()
        if self.walk_weights is None:
            return new                      # a single configuration: nowhere to walk
        rows = np.arange(len(points))
        if self.settings.uniform_knobs:
            axes = self.rng.integers(0, len(self.shape), size=len(points))
        else:
            axes = self.rng.choice(len(self.shape), size=len(points), p=self.walk_weights)
        sizes = self.shape[axes]
        shift = np.where(sizes > 1, self.rng.integers(1, np.maximum(sizes, 2)), 0)
        new[rows, axes] = (points[rows, axes] + shift) % sizes
        return new

    def find_maximums(self, predict: Callable[[np.ndarray], np.ndarray], num: int, exclude: set[int],
                      bias: np.ndarray | None = None) -> list[int]:
        """Flat indices of up to ``num`` unmeasured points with the highest scores of at least ``min_score``."""
        st = self.settings
        table = None
        if self.space.size <= TABLE_MAX_POINTS:
            table = predict(self.space.all_points()).astype(np.float64)
            if bias is not None:
                table = table + bias

        def score(points: np.ndarray) -> np.ndarray:
            flat = np.ravel_multi_index(points.T, self.space.shape)
            if table is not None:
                return table[flat]
            s = predict(points).astype(np.float64)
            return s + bias[flat] if bias is not None else s

        points = self.chains if self.chains is not None else self._random_points(st.parallel_size)
        scores = score(points)
        heap: list[tuple[float, int]] = [(float("-inf"), -1 - i) for i in range(num)]
        in_heap = set(exclude) | {item[1] for item in heap}

        def offer(pts: np.ndarray, scs: np.ndarray) -> bool:
            changed = False
            flat = np.ravel_multi_index(pts.T, self.space.shape)
            for s, f in zip(scs, flat, strict=True):
                f = int(f)
                if s > heap[0][0] and f not in in_heap:
                    popped = heapq.heapreplace(heap, (float(s), f))
                    in_heap.discard(popped[1])
                    in_heap.add(f)
                    changed = True
            return changed

        offer(points, scores)
        temp = st.temp_start
        cool = (st.temp_start - st.temp_end) / (st.n_iter + 1)
        step, last_change = 0, 0
        while step < st.n_iter and step < last_change + st.early_stop:
            new_points = self._walk(points)
            new_scores = score(new_points)
            accept_prob = np.exp(np.minimum((new_scores - scores) / (temp + 1e-5), 1))
            accept = self.rng.random(len(accept_prob)) < accept_prob
            points[accept] = new_points[accept]
            scores[accept] = new_scores[accept]
            if offer(new_points, new_scores):
                last_change = step
            step += 1
            temp -= cool
        self.chains = points
        heap.sort(key=lambda item: -item[0])
        floor = st.min_score if st.min_score is not None else float("-inf")
        return [f for s, f in heap if s >= floor and s > float("-inf") and f >= 0]
