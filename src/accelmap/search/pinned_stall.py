"""Rule B24 of docs/mapper.md: a single-buffered level that holds one element stalls compute at every step that moves it.

The latency model (``cost/latency.py``, ``_single_stall``) stops compute at every tile change of a single-buffered
level while the change's transfers run, and sums those stalls over the run's tile changes: per change the time of the
slowest of its transfers (different levels' units run side by side), not a share of a total. The unrolling bounds
(rules S1, S3, S7) saw only totals, with every element entering each level once.

A level c that can hold at most one element of an operand X (its capacity for X below two elements at X's fewest
bits) and never overlaps its loads with compute pins X: no loop over a dim X uses may sit at or below c (it would put
two elements in c), so every temporal loop over a plain dim of X (a dim X indexes by itself) is above c, and each of
its steps changes X's one element at c (the plain axis moves by at least one). So under an unrolling:

* a step of a temporal loop over a dim of ``U`` moves some pinned (X, c) whose plain dims meet ``U``; such steps number
  at least ``T_U - 1``, ``T_U`` the temporal iterations of U's dims (outermost, their own steps telescope to that;
  other loops outside them only multiply them);
* each such change stalls compute at least as long as X's move at c alone: for an input, the setup of c plus one
  element over c's write port or, over p's read port (p the level above c in X's chain), the elements p reads for one
  element in each instance of c (the unrolling between p and c over its multicast merges); for the output, the store
  of the old element (over c's read port, or p's write port with the reducing merges). The model spreads a move's
  data over the instances the unrolling occupies, so a padded round's idle lanes scale the data (not the setup) by
  the unrolling's utilization, at least the product over dims of ``size / (bound x rounds)``.

With the pinned (X, c) of a choice of level sets sorted by that time, ``t_1 <= ... <= t_m``, a change costs at least
the largest ``t_j`` among those it moves, so the stall is at least ``sum_j (t_j - t_{j-1}) x (T_{U_j} - 1)``, ``U_j``
the plain dims of the pinned pairs j..m. Latency is at least the MAC schedule plus that stall. On edge_tpu_like both
one-element registers (the partial sum's and the weight's) pin, and every step of a convolution moves one of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.nest_rows import fewest_bits
from accelmap.workload.operator import Operand, Operator


def plain_dims(X: Operand) -> frozenset[str]:
    """The dims X indexes by themselves (an axis ``a x d``): a step over one moves X's point on that axis."""
    return frozenset(ix.terms[0][0] for ix in X.indices if len(ix.terms) == 1)


def pinned_levels(arch: Accelerator, X: Operand, chain: Sequence[int], serial: frozenset[int]) -> list[int]:
    """The levels of X's chain (past its first) that hold at most one element of X and never overlap their loads
    with compute (``serial``: ``bounds.serial_fill_levels``)."""
    w = fewest_bits(X, arch)
    out = []
    for c in chain[1:]:
        cap = arch.levels[c].capacity_for(X.cls)
        if c in serial and cap is not None and cap < 2 * w:
            out.append(c)
    return out


@lru_cache(maxsize=4096)
def least_utilization(sizes: tuple[int, ...], product: int) -> float:
    """The least, over every split of ``product`` into per-dim spatial bounds ``u_d`` (each at most ``2 x size - 1``,
    what a dim split over several axes may take), of the share of lanes busy, ``prod size / (u x ceil(size / u))``."""
    best = 1.0
    if product == 1:
        return best
    if len(sizes) == 1:
        s = sizes[0]
        return s / (product * math.ceil(s / product)) if product <= 2 * s - 1 else 1.0
    s, rest = sizes[0], sizes[1:]
    for u in range(1, min(product, 2 * s - 1) + 1):
        if product % u == 0:
            best = min(best, s / (u * math.ceil(s / u)) * least_utilization(rest, product // u))
    return best


class PinnedStall:
    """Rule B24 for the rows of one set of unrollings: ``columns`` are dims (or classes of dims alike in which
    operands use them), ``temporal`` [row, column] the fewest temporal iterations each leaves, ``plain`` per operand the
    columns whose dims it indexes by themselves, ``utilization`` [row] the least share of busy lanes, ``level_pes``
    [row, level] the unrolling at each level's fan-out, ``merges`` per operand [row, level] (``spatial.group_merges``).
    Called with one level set per operand (indices into ``chains``), it gives the stall per row."""

    def __init__(self, op: Operator, arch: Accelerator, chains: dict[str, list[list[int]]], serial: frozenset[int],
                 loose, temporal: np.ndarray, plain: dict[str, np.ndarray], utilization: np.ndarray,
                 level_pes: np.ndarray, merges: dict[str, np.ndarray]):
        self.temporal = temporal
        self.plain = plain
        # per operand, per level set: [(time per change [row], plain columns)]
        self.entries: list[list[list[tuple[np.ndarray, np.ndarray]]]] = []
        for X in op.operands:
            per_set = []
            for chain in chains[X.name]:
                got = []
                if not loose(arch, X, chain) and plain[X.name].any():
                    w = fewest_bits(X, arch)
                    for c in pinned_levels(arch, X, chain, serial):
                        p = chain[chain.index(c) - 1]
                        spread = np.prod(level_pes[:, p:c] / merges[X.name][:, p:c], axis=1)
                        C, P = arch.levels[c], arch.levels[p]
                        child_bw, parent_bw = (C.read_bw_bits, P.write_bw_bits) if X.is_output else \
                            (C.write_bw_bits, P.read_bw_bits)
                        data = np.zeros(len(temporal))
                        if child_bw is not None:
                            data = np.maximum(data, w / child_bw)
                        if parent_bw is not None:
                            data = np.maximum(data, w * spread / parent_bw)
                        got.append((C.transfer_setup_cycles + utilization * data, plain[X.name]))
                per_set.append(got)
            self.entries.append(per_set)

    def __call__(self, pick: tuple[int, ...]) -> np.ndarray:
        """The stall per row when operand k keeps the level set ``chains[k][pick[k]]``."""
        return self.of_entries([e for k, j in enumerate(pick) for e in self.entries[k][j]])

    def cases(self, pick: tuple[int, ...]) -> list[tuple[np.ndarray | None, np.ndarray]]:
        """Cases of the unrolling's loops, each (energy every mapping in it adds, or None; its stall), every mapping
        in one of them: here one case, B24's stall (rule B33, ``pinned_cases``, splits it)."""
        return [(None, self(pick))]

    def ranking_cases(self, pick: tuple[int, ...]) -> list[tuple[np.ndarray | None, np.ndarray]] | None:
        """``cases`` without the terms kept for bounds only (rule B64's refill stall, ``unrolling_refills``), for the
        order E1 visits unrollings in; None where there are none (the order then takes ``cases``)."""
        return None

    def of_entries(self, entries: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """The stall per row of pinned pairs given as (time per change [row], plain columns)."""
        rows = len(self.temporal)
        if not entries:
            return np.zeros(rows)
        times = np.stack([t for t, _ in entries])                     # [pinned, row]
        masks = np.stack([m for _, m in entries])                     # [pinned, column]
        order = np.argsort(times, axis=0, kind="stable")
        ranked = np.take_along_axis(times, order, axis=0)
        total, prev = np.zeros(rows), np.zeros(rows)
        for j in range(len(entries)):
            union = masks[order[j:]].any(axis=0)                      # [row, column]: the plain dims of pairs j..m
            steps = np.prod(np.where(union, self.temporal, 1.0), axis=1)
            total = total + (ranked[j] - prev) * np.maximum(steps - 1.0, 0.0)
            prev = ranked[j]
        return total


def dim_pinned_stall(op: Operator, arch: Accelerator, chains: dict[str, list[list[int]]], serial: frozenset[int],
                     loose, used: np.ndarray, level_pes: np.ndarray,
                     merges: dict[str, np.ndarray]) -> PinnedStall:
    """Rule B24 for unrollings given per dim (``used`` [row, dim], in ``op.dim_names`` order)."""
    sizes = np.array([op.sizes[d] for d in op.dim_names], dtype=np.float64)
    rounds = np.ceil(sizes / used)
    plain = {X.name: np.array([d in plain_dims(X) for d in op.dim_names]) for X in op.operands}
    utilization = np.prod(sizes / (used * rounds), axis=1)
    return PinnedStall(op, arch, chains, serial, loose, rounds, plain, utilization, level_pes, merges)


def class_pinned_stall(op: Operator, arch: Accelerator, chains: dict[str, list[list[int]]], serial: frozenset[int],
                       loose, members: list[list[str]], total: np.ndarray, level_pes: np.ndarray,
                       merges: dict[str, np.ndarray]) -> PinnedStall:
    """Rule B24 for the certificate's relaxation (``spatial.certified_lower_bound``): columns are classes of dims
    (``members``), ``total`` [row, class] each class's unrolling. A class's temporal iterations are at least
    ``ceil(its size / its unrolling)``; its utilization the least over every split of its unrolling among its dims."""
    budgets = np.array([math.prod(op.sizes[d] for d in dims) for dims in members], dtype=np.float64)
    temporal = np.ceil(budgets / total)
    plain = {X.name: np.array([all(d in plain_dims(X) for d in dims) and all(d in X.dims for d in dims)
                               for dims in members]) for X in op.operands}
    utilization = np.ones(len(total))
    for k, dims in enumerate(members):
        if not all(d in op.output.dims for d in dims):
            continue        # a reduced dim is unrolled by divisors only (a spatial reduction is complete): no idle lane
        sizes = tuple(op.sizes[d] for d in dims)
        values, inverse = np.unique(total[:, k], return_inverse=True)
        share = np.array([least_utilization(sizes, int(v)) for v in values])
        utilization = utilization * share[inverse.reshape(-1)]
    return PinnedStall(op, arch, chains, serial, loose, temporal, plain, utilization, level_pes, merges)


def level_unrolling(nlev: int, groups: Sequence[tuple[int, np.ndarray]], rows: int) -> np.ndarray:
    """[row, level]: the product of the spatial bounds at each level's fan-out (``groups``: (level, bounds[row, column])
    per axis or group of axes)."""
    out = np.ones((rows, nlev))
    for lvl, B in groups:
        out[:, lvl] *= B.prod(axis=1)
    return out
