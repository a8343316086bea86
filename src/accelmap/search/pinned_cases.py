"""Rule B33 of docs/mapper.md: under an unrolling, a pinned level refills at every step in the cases that force it.

Rule B24 (``pinned_stall``) takes a level c that holds at most one element of an operand X and never overlaps its
loads with compute: no loop over a dim X uses sits at or below c, and every step of a temporal loop over a plain dim of
X moves X's element at c. Rule B17 of the node bound goes one step further with the loops' order: in the case where
the innermost temporal loop runs over a plain dim d of X, that loop is above c (a loop over d at or below c would put a
second element in c), so every temporal loop is above c and every temporal step of every instance of c changes X's
element there (the step moves d's position, or an outer step wraps d back). The unrolling bounds (S1 with B24, B25)
counted X's fills at c by its footprint: on edge_tpu_like, whose weight register and partial-sum register hold one
element each, S1's cheapest bypass choices fed the weight register from DRAM at a footprint's cost, while every
mapping refills one of the two registers at every step, and the root node bound of the same unrolling was 3-8x higher.

Per combination of level sets and per case d (a dim of size above 1: every mapping with a temporal loop has an
innermost one over some such dim; a row whose fewest temporal iterations are 1 keeps B24's case alone), the pinned
pairs (X, c) with d a plain dim of X move at every step:

* energy: X enters c at least once per (instance of c, temporal step) that computes any MAC, at least
  ``m = MACs / (PEs under one instance of c)`` times (each such pair computes at most that many MACs; with a dividing
  unrolling ``m`` is the temporal iterations times c's instances). The boundary (p, c) (p the level above c in X's
  set) is charged as rule B1 charges a count: for an input, ``m`` fills of c, ``max(m / merge, footprint)`` reads of p
  (merge: the multicast merges of the fan-outs between p and c), the network energy of ``m`` fills; for the output,
  ``m`` drains of c, ``g = max(m / merge, footprint)`` updates of p (merge: the reducing merges), ``max(0, g - footprint
  x (lineages above p - initial read))`` reloads (fills of c, reads of p), and the network energy of drains and
  reloads. The case adds what that exceeds S1's footprint charge of the same boundary (S1's other terms stay: they are
  per level and per boundary, and this replaces one boundary's count by a larger one, the charge being
  non-decreasing in the count);
* latency: those pairs change at each of the ``T - 1`` steps (T the fewest temporal iterations of the whole unrolling,
  B24's columns all together), so B24's sum is taken with their plain columns widened to every column.

Every mapping is in some case (the dim of its innermost temporal loop), so for a scalar objective f, non-decreasing in
energy and latency, its f is at least the least over the cases of f(S1's combination energy + the case's energy,
max(the combination's latency, MAC schedule + the case's stall)); rule B25 pairs them (``CombinationPairs``). The
unpaired latency bound takes the least over the cases; the unpaired energy bound is left as it is. In the certificate's
relaxation (rule S2) the columns are classes of dims and a pair moves in the case of a class only when every dim of the
class is a plain dim of X (a smaller set of movers: still a bound).
"""

from __future__ import annotations

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.nest_rows import fewest_bits
from accelmap.search.bounds import network_unit
from accelmap.search.pinned_stall import PinnedStall, pinned_levels
from accelmap.workload.operator import Operand, Operator


class PinnedCases(PinnedStall):
    """Rule B24's stall with rule B33's cases. Built from a ``PinnedStall`` (its entries, columns and plain masks) and,
    per row, ``merges`` (per operand [row, level], ``spatial.group_merges``), ``level_pes`` [row, level] and which
    columns are cases (``case_columns``: those whose dims have size above 1)."""

    def __init__(self, stall: PinnedStall, op: Operator, arch: Accelerator, chains: dict[str, list[list[int]]],
                 serial: frozenset[int], loose, merges: dict[str, np.ndarray], level_pes: np.ndarray,
                 case_columns: np.ndarray):
        self.__dict__.update(stall.__dict__)
        self.case_columns = np.flatnonzero(case_columns)
        self.steps = np.prod(self.temporal, axis=1)
        # per operand, per level set: per pinned level (the order of ``entries``), the energy its every-step refills
        # add over S1's footprint charge [row]
        self.extras: list[list[list[np.ndarray]]] = []
        for X in op.operands:
            per_set = []
            for chain in chains[X.name]:
                got = []
                if not loose(arch, X, chain) and self.plain[X.name].any():
                    for c in pinned_levels(arch, X, chain, serial):
                        p = chain[chain.index(c) - 1]
                        m = op.macs / np.prod(level_pes[:, c:], axis=1)
                        got.append(_extra_energy(op, arch, X, p, c, m, merges[X.name]))
                per_set.append(got)
            self.extras.append(per_set)

    def cases(self, pick: tuple[int, ...]) -> list[tuple[np.ndarray | None, np.ndarray]]:
        entries = [e for k, j in enumerate(pick) for e in self.entries[k][j]]
        extras = [x for k, j in enumerate(pick) for x in self.extras[k][j]]
        base = self.of_entries(entries)
        if not entries:
            return [(None, base)]
        temporal = self.steps >= 2
        every = np.ones(self.temporal.shape[1], dtype=bool)
        out: list[tuple[np.ndarray | None, np.ndarray]] = []
        seen: set[tuple[int, ...]] = set()
        for col in self.case_columns:
            movers = tuple(i for i, (_, mask) in enumerate(entries) if mask[col])
            if movers in seen:
                continue
            seen.add(movers)
            if not movers:
                out.append((None, base))
                continue
            widened = [(t, every if i in movers else mask) for i, (t, mask) in enumerate(entries)]
            stall = np.where(temporal, self.of_entries(widened), base)
            extra = np.where(temporal, sum(extras[i] for i in movers), 0.0)
            out.append((extra, stall))
        return out or [(None, base)]


def _extra_energy(op: Operator, arch: Accelerator, X: Operand, p: int, c: int, m: np.ndarray,
                  merges: np.ndarray) -> np.ndarray:
    """What the boundary (p, c) of X costs with X entering c ``m`` times beyond S1's charge of it with the footprint
    (``bounds.spatial_bounds``: the same level energies, bits, merges and network energy)."""
    w = fewest_bits(X, arch)
    P, C = arch.levels[p], arch.levels[c]
    read_p, write_p = P.read_energy_pj * w / P.width_bits, P.write_energy_pj * w / P.width_bits
    read_c, write_c = C.read_energy_pj * w / C.width_bits, C.write_energy_pj * w / C.width_bits
    unit = network_unit(arch, X, p, c)
    fp = float(op.footprint(X))
    merge = np.prod(merges[:, p:c], axis=1)
    m = np.maximum(m, fp)
    if not X.is_output:
        new = m * write_c + np.maximum(m / merge, fp) * read_p + m * unit
        return np.maximum(0.0, new - fp * (write_c + read_p + unit))
    init_read = 1 if op.init_output == "read" else 0
    lineages = np.prod(merges[:, :p], axis=1)

    def charge(drains: np.ndarray, updates: np.ndarray) -> np.ndarray:
        down = np.maximum(0.0, updates - fp * (lineages - init_read))
        return down * (write_c + read_p) + drains * read_c + updates * write_p + (down + drains) * unit
    return np.maximum(0.0, charge(m, np.maximum(m / merge, fp)) - charge(np.full_like(m, fp), np.full_like(m, fp)))
