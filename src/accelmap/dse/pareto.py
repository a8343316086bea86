"""Pareto fronts of a sweep: the designs no other design beats in every metric at once."""

from __future__ import annotations

import numpy as np

from accelmap.dse.sweep import Outcome

METRICS = ("energy", "latency", "area", "edp")


def dominated(values: np.ndarray) -> np.ndarray:
    """Row i is dominated when some row is <= it in every column and < in one (all minimised)."""
    le = np.all(values[None, :, :] <= values[:, None, :], axis=2)      # le[i, j]: row j <= row i everywhere
    lt = np.any(values[None, :, :] < values[:, None, :], axis=2)
    return np.asarray(np.any(le & lt, axis=1))


def pareto_front(outcomes: list[Outcome], metrics: tuple[str, ...] = ("energy", "latency", "area")) -> list[Outcome]:
    """The mapped designs on the front of ``metrics``, ordered by the first metric."""
    for m in metrics:
        if m not in METRICS:
            raise ValueError(f"unknown metric {m!r}; choose from {', '.join(METRICS)}")
    ok = [o for o in outcomes if o.ok]
    if not ok:
        return []
    vals = np.array([[getattr(o, m) for m in metrics] for o in ok], dtype=float)
    keep = ~dominated(vals)
    # Designs with equal metrics (the same accelerator from two points) both stay.
    front = [o for o, k in zip(ok, keep, strict=True) if k]
    return sorted(front, key=lambda o: tuple(getattr(o, m) for m in metrics))
