"""Rule B22 of docs/mapper.md: a node's bound keeps each case's (energy, latency) pair together.

The node bound (``BoundContext.lower_bound``, ``node_bounds.open_bounds_rows``) splits the mappings below a node
into cases of the unfixed loops (rules B7, B15, B17, B18: which dim the innermost unfixed temporal loop runs over,
in which order the operands' refetching loops come). Every mapping is in one case, and in its case its energy is at
least the case's energy bound and its latency at least the case's latency bound, both at once. Taking the least
energy and the least latency over the cases separately pairs one case's energy with another's latency; for a
scalar objective f (non-decreasing in both) the least f over the cases' own pairs is also a bound, and larger:
on edge_tpu_like the case where the weights move has the least energy and the case where the partial sums move
the least latency, and no mapping has both.

``CaseBound`` collects the cases' pairs and returns one pair: for a scalar objective, the pair of the case with the
least objective value (its objective value is the least over the cases, which is all the search asks of it:
``TopK.prunes`` and the ranking read the pair only through f); without one (the Pareto front, or callers that want
an energy bound and a latency bound each valid alone) the least energy and the least latency, as before.
"""

from __future__ import annotations

import math

import numpy as np

from accelmap.search.objective import scalar

# Objectives for which a case's pair may stand for the node (f of the pair is the least f over the cases).
SCALAR_OBJECTIVES = ("energy", "latency", "edp")


class CaseBound:
    """The least (energy, latency) bound over cases of one node (plain floats: the scalar bound's hot path)."""

    def __init__(self, objective: str | None):
        self.paired = objective in SCALAR_OBJECTIVES
        self.objective = objective or "edp"
        self.energy = self.latency = self.value = math.inf

    def add(self, energy: float, latency: float) -> None:
        """One case's bounds."""
        if not self.paired:
            self.energy = min(self.energy, energy)
            self.latency = min(self.latency, latency)
            return
        value = scalar(self.objective, energy, latency)
        if value < self.value:        # (a NaN, inf x 0 from a case with no bound, is never taken)
            self.energy, self.latency, self.value = energy, latency, value

    def pair(self) -> tuple[float, float]:
        return self.energy, self.latency


class CaseBoundRows:
    """``CaseBound`` per row of the batched node bound."""

    def __init__(self, objective: str | None, rows: int):
        self.paired = objective in SCALAR_OBJECTIVES
        self.objective = objective or "edp"
        self.energy = np.full(rows, np.inf)
        self.latency = np.full(rows, np.inf)
        self.value = np.full(rows, np.inf)

    def add(self, energy: np.ndarray, latency: np.ndarray, mask: np.ndarray) -> None:
        """One case's bounds, on the rows of ``mask``."""
        energy = np.broadcast_to(energy, self.energy.shape)
        latency = np.broadcast_to(latency, self.latency.shape)
        if not self.paired:
            self.energy = np.where(mask, np.minimum(self.energy, energy), self.energy)
            self.latency = np.where(mask, np.minimum(self.latency, latency), self.latency)
            return
        with np.errstate(invalid="ignore"):
            value = scalar(self.objective, energy, latency)
        take = mask & (value < self.value)
        self.energy = np.where(take, energy, self.energy)
        self.latency = np.where(take, latency, self.latency)
        self.value = np.where(take, value, self.value)

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        return self.energy, self.latency
