"""Rule B25 of docs/mapper.md: under an unrolling, each combination of level sets keeps its energy and latency together.

Rule S1 (``bounds.spatial_bounds``) bounds energy by the sum over operands of each operand's least energy over the
level sets it may take, and latency (S3, S7, B24) by the least over combinations of level sets (one per operand) of
that combination's ports and stalls. A mapping keeps each operand at one level set, so its energy is at least the sum
of its sets' energies and its latency at least its combination's latency bound, both at once. Pairing the least
energy with the least latency joins two different combinations: on edge_tpu_like, keeping the partial sums in their
one-element register has the least energy (the MACs do not update the activation memory) and bypassing it the least
latency (no register stalls), and no mapping has both. For a scalar objective f, non-decreasing in energy and latency,
every mapping's f is at least f of its own combination's pair, hence at least the least f over the combinations'
pairs (rule B22's argument, over level sets instead of cases). Callers read the pair only through f (rule E1's ranking
and cut, the certificate), so for such an objective the pair with the least f stands for the row.
"""

from __future__ import annotations

import numpy as np

from accelmap.search.case_pairs import CaseBoundRows


class CombinationPairs:
    """The least-f (energy, latency) pair per row over the combinations of level sets S3's loop visits, filled by
    ``bounds.spatial_bounds`` (``start``) and ``bounds.shared_port_bound`` (``add``); ``objective`` None or "pareto":
    nothing is paired (``done`` stays false)."""

    def __init__(self, objective: str | None):
        self.objective = objective
        self.visited = self.combinations = 0
        self.seen: set[tuple[int, ...]] = set()

    def start(self, base: np.ndarray, energies: list[list[np.ndarray]], floor: np.ndarray) -> None:
        """``base``: energy every combination has (the MACs); ``energies``: per operand, per level set, its energy per
        row; ``floor``: a latency bound every combination has (the MAC schedule, each operand's least port time)."""
        self.base, self.energies, self.floor = base, energies, floor
        self.cases = CaseBoundRows(self.objective, len(base))
        self.combinations = int(np.prod([len(e) for e in energies]))

    def add(self, pick: tuple[int, ...], cycles: np.ndarray, extra: np.ndarray | None = None) -> None:
        """One combination (operand k at its level set ``pick[k]``) with its latency bound ``cycles`` per row; ``extra``:
        energy per row every mapping of the combination adds in one case of its loops (rule B33; a combination may be
        added once per case, and is counted once)."""
        if not self.cases.paired:
            return
        energy = self.base + sum(self.energies[k][j] for k, j in enumerate(pick))
        if extra is not None:
            energy = energy + extra
        self.cases.add(energy, np.maximum(self.floor, cycles), np.ones(len(self.base), dtype=bool))
        if pick not in self.seen:
            self.seen.add(pick)
            self.visited += 1

    @property
    def done(self) -> bool:
        """Whether every combination was paired (a scalar objective, and S3's loop did not fall back to per-operand
        minima past its limit)."""
        return self.combinations > 0 and self.visited == self.combinations

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        return self.cases.rows()
