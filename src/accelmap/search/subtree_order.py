"""The order in which the exact search opens the subtrees of the unrollings its bound does not cut.

Rule E1 of docs/mapper.md visits unrollings in order of their S1 bound and searches each one the best found does not
cut with the unrolling fixed. The bound decides which unrollings *can* win, but among those below the incumbent it
says little about which subtree holds a good mapping: on ResNet-18 layer3.0.conv1 on simba_like the first eight
classes (S1 bound 0.772 of the heuristic's EDP) are padded unrollings whose best probes lie 2.8x above the incumbent
and whose subtrees found nothing in 4 CPU s each, while the ninth (0.773, dividing) probes at 0.95x and its subtree
finds 0.89x. Within 10 s the bound order never reached it.

So the rows are taken in bound order in *windows* of ``WINDOW`` classes of equal fan-out products (rule S5), every
class of a window is probed as the heuristic probes an unrolling (``probes.probe_values``: the best of its maximal
tilings and a few random ones, costed by the batch model), and the classes whose probe lies below the best found
(their subtree holds a better mapping, or one close to it: a padded unrolling is probed on its padded operator) are
opened first, in order of their probe; the others keep the bound order after them. Where no probe beats the best
found the bound order is kept, and later windows are not probed (the probes cost 25-100 ms per class, and a window
whose classes' tilings are all worse than the incumbent says the bound order is as good a guess as any there: on
layer4.0.conv1 of simba_like every probe of the first 16 classes lies 1.4-1.7x above the incumbent, and the first
class in bound order holds a mapping 0.68x of it, which a probe order over those near-equal probes did not open first).
The probes only decide the order: every row is still either cut by its own bound against the best found at
its turn, skipped by rules S4, S5 or B45, or searched. Windows are built in bound order, so once a window's first
row is cut (scalar objective) every later row is cut too, as in E1. The set of rows covered is E1's, and the proof
(every row cut or searched to the end) is E1's: the order changes what is found within a limit, never what is
proven. For the Pareto front, or a window of one class, the order is E1's bound order exactly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

import numpy as np

from accelmap.search.objective import ParetoFront, TopK

# Classes of equal fan-out products (rule S5) per window; a window's probes together cost about 0.3-1 CPU s on the
# ResNet-18 layers of simba_like (60-100 ms per padded class, less per dividing one: those share one call).
WINDOW = 16
# Share of the time left at a window's start its probes may take; past it the window's remaining classes are not
# probed (they keep bound order after the probed ones).
PROBE_SHARE = 0.1
# Classes probed per call of the probe (the clock is read between calls).
PROBE_CHUNK = 4


class SubtreeOrder:
    """The rows of ``order`` (E1's bound order) as the exact search should open them (the module doc). ``probe``
    maps a list of rows to their probe values (lower is more promising); None: bound order. Iterate to get the rows;
    ``cut`` counts the rows left unvisited because a window's first row was cut (scalar objective: every later row
    then has a bound at least as high). The caller still checks each row's bound at its turn."""

    def __init__(self, order: np.ndarray, energy: np.ndarray, latency: np.ndarray, cls: np.ndarray,
                 best: TopK | ParetoFront, *, probe: Callable[[list[int]], list[float]] | None = None,
                 window: int = WINDOW, deadline: float | None = None):
        self.order, self.energy, self.latency, self.cls = order, energy, latency, cls
        self.best = best
        self.pareto = isinstance(best, ParetoFront)
        # the value a probe must beat (a top-k list's k-th best; the Pareto front is never probed)
        self.threshold: Callable[[], float] | None = None if isinstance(best, ParetoFront) else best.threshold
        self.probe = None if self.pareto or window <= 1 else probe
        self.window = 1 if self.probe is None else window
        self.deadline = deadline
        self.cut = 0
        self.probed = 0              # classes probed
        self.reordered = 0           # windows whose visiting order differs from the bound order
        self.probing = self.probe is not None     # until a window's probes show no class below the best found

    def __iter__(self) -> Iterator[int]:
        order, n = self.order, len(self.order)
        pos = 0
        while pos < n:
            rows: list[int] = []
            classes: list[int] = []
            while pos < n:
                row = int(order[pos])
                if not self.pareto and self.best.prunes(float(self.energy[row]), float(self.latency[row])):
                    self.cut += n - pos         # in bound order: no later unrolling can win either
                    pos = n
                    break
                c = int(self.cls[row])
                if c not in classes:
                    if len(classes) == self.window:
                        break
                    classes.append(c)
                rows.append(row)
                pos += 1
            yield from self._visit(rows, classes)

    def _visit(self, rows: list[int], classes: list[int]) -> list[int]:
        """The window's rows whose class probes below the best found first, in order of the probe, then the rest in
        bound order."""
        if self.probe is None or not self.probing or len(classes) < 2:
            return rows
        value: dict[int, float] = {}
        first: dict[int, int] = {}
        for row in rows:
            first.setdefault(int(self.cls[row]), row)
        start = time.perf_counter()         # (read at call time: a benchmark may make it the CPU clock)
        budget = math.inf if self.deadline is None else PROBE_SHARE * max(0.0, self.deadline - start)
        for k in range(0, len(classes), PROBE_CHUNK):
            if time.perf_counter() - start > budget:
                break
            chunk = classes[k:k + PROBE_CHUNK]
            for c, v in zip(chunk, self.probe([first[c] for c in chunk]), strict=True):
                value[c] = v
            self.probed += len(chunk)
        assert self.threshold is not None           # (the Pareto front is never probed)
        threshold = self.threshold()
        better = {c: v for c, v in value.items() if v < threshold}
        if not better:
            self.probing = False
            return rows
        rank = {row: i for i, row in enumerate(rows)}
        out = sorted(rows, key=lambda r: (better.get(int(self.cls[r]), math.inf), rank[r]))
        self.reordered += out != rows
        return out
