"""Validity-driven initialisation (Rieber's dissertation, ch. 5): neighbourhood presampling and
distance-maximising sample selection.

Valid configurations of a schedule space form one connected region in knob space (Manhattan
neighbourhoods), and the best ones sit on its edge. Presampling (Algorithm 4) walks that region with
the cheap validity check alone (building the program, no measurement): from every valid point it
expands to its Manhattan neighbours, from an invalid one it jumps to a random new point. Selection
(Algorithm 5) then picks a first batch that is spread out: each new point maximises both the mean and
the minimum Manhattan distance to the points already chosen.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from accelmap.tune.knobs import KnobSpace

Point = tuple[int, ...]


def presample(space: KnobSpace, is_valid: Callable[[Point], bool], n_samples: int, n_parallel: int,
              rng: np.random.Generator) -> dict[Point, bool]:
    """Algorithm 4: ``n_samples`` validity checks (at most the space), returned in the order made."""
    n_samples = min(n_samples, space.size)
    checked: dict[Point, bool] = {}
    frontier = [space.point(int(i)) for i in rng.choice(space.size, size=min(n_parallel, space.size),
                                                         replace=False)]
    while len(checked) < n_samples:
        candidates: dict[Point, None] = {}
        for p in frontier:
            if len(checked) >= n_samples:
                break
            if p in checked:
                continue
            ok = is_valid(p)
            checked[p] = ok
            if ok:
                for q in space.neighbours(p):
                    if q not in checked:
                        candidates[q] = None
            else:
                jump = _random_new(space, checked, candidates, rng)
                if jump is not None:
                    candidates[jump] = None
        pool = list(candidates)
        if not pool:
            jump = _random_new(space, checked, {}, rng)
            if jump is None:
                break
            pool = [jump]
        take = rng.choice(len(pool), size=min(n_parallel, len(pool)), replace=False)
        frontier = [pool[int(i)] for i in take]
    return checked


def _random_new(space: KnobSpace, checked: dict, candidates: dict, rng: np.random.Generator,
                tries: int = 64) -> Point | None:
    """A uniformly drawn point not checked and not yet a candidate (None when the space is used up)."""
    for _ in range(tries):
        p = space.point(int(rng.integers(space.size)))
        if p not in checked and p not in candidates:
            return p
    if len(checked) + len(candidates) >= space.size:
        return None
    rest = [space.point(i) for i in range(space.size)
            if space.point(i) not in checked and space.point(i) not in candidates]
    return rest[int(rng.integers(len(rest)))] if rest else None


def select_spread(points: list[Point], num: int, rng: np.random.Generator) -> list[Point]:
    """Algorithm 5: start from a random point, then repeatedly add the point whose Manhattan distances
    to the chosen ones have both a larger mean and a larger minimum than every point considered
    before it. When no point beats the (0, 0) start in both (all remaining points coincide with
    chosen ones), the rest are taken at random so the batch still has ``num`` points."""
    num = min(num, len(points))
    if num <= 0:
        return []
    arr = np.array(points, dtype=np.int64)
    chosen = [int(rng.integers(len(points)))]
    remaining = np.ones(len(points), dtype=bool)
    remaining[chosen[0]] = False
    dist_sum = np.abs(arr - arr[chosen[0]]).sum(axis=1).astype(np.float64)
    dist_min = dist_sum.copy()
    while len(chosen) < num:
        idx = np.flatnonzero(remaining)
        mean = dist_sum[idx] / len(chosen)
        mins = dist_min[idx]
        pick = _first_improving(mean, mins)
        new = int(idx[pick]) if pick is not None else int(rng.choice(idx))
        chosen.append(new)
        remaining[new] = False
        d = np.abs(arr - arr[new]).sum(axis=1)
        dist_sum += d
        dist_min = np.minimum(dist_min, d)
    return [points[i] for i in chosen]


def _first_improving(mean: np.ndarray, mins: np.ndarray) -> int | None:
    """The dissertation's scan: keep a candidate when its mean and its minimum both exceed the best so far."""
    best_mean, best_min, best = 0.0, 0.0, None
    for i in range(len(mean)):
        if mean[i] > best_mean and mins[i] > best_min:
            best_mean, best_min, best = float(mean[i]), float(mins[i]), i
    return best
