"""The tuning loop: ask a tuner for a batch, measure it, tell the tuner, until the trial budget is spent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from accelmap.tune.measure import Measurement
from accelmap.tune.tuners import Tuner

Point = tuple[int, ...]
TIE_TOLERANCE = 1e-9   # relative: a measured cost this close to the best counts as reaching it


def measured_cost(m: Measurement) -> float:
    """The cost of a valid measurement (the sort key of the best)."""
    if m.cost is None:
        raise ValueError(f"configuration {m.point} has no cost: {m.error}")
    return m.cost


@dataclass
class TuneRun:
    tuner: str
    history: list[Measurement] = field(default_factory=list)   # in trial order
    exhausted: bool = False                                    # the space ran out before the budget

    @property
    def best(self) -> Measurement | None:
        valid = [m for m in self.history if m.valid and m.cost is not None]
        return min(valid, key=measured_cost) if valid else None

    def best_so_far(self) -> list[float | None]:
        """Best cost after each trial (None until the first valid one)."""
        out: list[float | None] = []
        best: float | None = None
        for m in self.history:
            if m.valid and m.cost is not None and (best is None or m.cost < best):
                best = m.cost
            out.append(best)
        return out

    def trials_to_reach(self, target: float, tolerance: float = TIE_TOLERANCE) -> int | None:
        """1-based trial at which a cost within ``tolerance`` (relative) of ``target`` was first measured."""
        for i, m in enumerate(self.history, 1):
            if m.valid and m.cost is not None and m.cost <= target * (1 + tolerance):
                return i
        return None


def run_tuner(tuner: Tuner, measure: Callable[[list[Point]], list[Measurement]], n_trials: int,
              batch_size: int = 50, on_batch: Callable[[TuneRun], None] | None = None) -> TuneRun:
    run = TuneRun(tuner.name)
    while len(run.history) < n_trials:
        batch = tuner.next_batch(min(batch_size, n_trials - len(run.history)))
        if not batch:
            run.exhausted = True
            break
        results = measure(batch)
        tuner.update(batch, results)
        run.history.extend(results)
        if on_batch is not None:
            on_batch(run)
    return run
