"""Rules B38 and B39 of docs/mapper.md: padded unrollings bounded by class and listed only where the class is not cut.

Rule E2 lists every padded unrolling bound (``spatial.enumerate_spatial(pad="every")``) and bounds each by rule S1;
past ``exact.EVERY_PADDED_ROWS`` candidates (every ascend_like convolution of ResNet-18, 10 of its 12 layers on
edge_tpu_like: 3x10^5-9x10^5) it listed only the fewest-rounds bound and proved nothing. Here the unrollings are
grouped as rule S2 groups them in the certificate, and each group is bounded once:

* **B38, the class of an unrolling.** Per group of fan-out axes (rule S2: an axis the constraints fix, or a fan-out
  level's free axes alike in multicast and reduce) and per class of dims (dims the same operands use), the product of
  the unrolling's bounds. Every unrolling with the same class vector in every group has the same PEs and the same
  merge per fan-out level and operand (both products over classes), and the rest of S1 reads it through the class
  products only: rule B32's schedule is at least the fewest rounds over every split of a class product, B24 and B33's
  temporal iterations and busy share are taken over every split as well. Rule S6 reads tiles: under a member whose
  every dim stays within its size the class extent inside a level is at most the member's tile there, so the class
  form keeps a bound; a member may pad a dim split over several axes past its size (P = 7 as 4 x 2), its tile is then
  clipped to the dim and smaller than the class extent, so S6 leaves no level set out on a class row any member of
  which may do that (``loose``: the product over groups of each dim's largest bound in the row's vectors passes the
  dim). So rule S1 of the class row (``spatial.class_vector_bounds``) is at most S1 of every member, hence at most the
  cost of every mapping with a member's unrolling. Unlike the certificate, the rows are the vectors real unrollings
  take (each group's axes' options combined, then their class products), so a class product past the class size
  (a split padded dim) has its row too.
* **B39, lazy expansion.** Classes are visited in bound order. A class whose bound the best found already meets is
  cut with its members unlisted (for a scalar objective so is every later class); the others are opened in tiers of
  about ``TIER_ROWS`` members: a tier's members (the groups' combinations of options with the tier's vectors, kept
  exactly as ``enumerate_spatial`` keeps rows) go through rule E1 (S1 ranking, cut or searched), and the next tier is
  opened against the best found after them. Every unrolling of the every-padded space is a member of exactly one
  class, so when every class was cut or opened and its members cut or searched to the end, every padded unrolling
  was covered without listing those of the cut classes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.search.objective import ParetoFront, TopK, scalar
from accelmap.search.space import Constraints
from accelmap.search.spatial import (
    BOUND_COMBINATIONS,
    CERTIFICATE_CHUNK,
    CertificateOutOfTime,
    SpatialSpace,
    _combinations,
    axis_matrices,
    class_vector_bounds,
    dim_classes,
    fanout_groups,
)
from accelmap.workload.operator import Operator

# Members listed per tier (rule B39): a tier is closed once its classes hold at least this many (a class is never
# split), about 0.3 s of CPU for their S1 bounds on edge_tpu_like.
TIER_ROWS = 20_000


@dataclass
class _GroupCombos:
    """One fan-out group's real assignments: every combination of its axes' options (``choice`` [combo, axis of the
    group], ``positions`` of those axes in the space), their per-dim products ``used`` [combo, dim], the distinct class
    vectors they take (``vectors`` [vector, class]), the combos of vector v (``order[starts[v]:starts[v + 1]]``) and per
    vector each dim's largest product (``max_used``)."""
    positions: list[int]
    choice: np.ndarray
    used: np.ndarray
    vectors: np.ndarray
    order: np.ndarray
    starts: np.ndarray
    max_used: np.ndarray


class PaddedClasses:
    """Every unrolling of the every-padded space (``enumerate_spatial(pad="every")`` with ``max_dims`` every dim) as
    class rows with rule B38's bounds, opened lazily by ``next_tier`` (rule B39). Raises ``TooManyUnrollings`` past
    ``BOUND_COMBINATIONS`` class rows, ``CertificateOutOfTime`` when ``clock`` passes ``deadline`` between chunks."""

    def __init__(self, op: Operator, arch: Accelerator, cons: Constraints, chains: dict[str, list[list[int]]],
                 objective: str, *, deadline: float | None = None, clock: Callable[[], float] | None = None):
        self.op, self.arch, self.cons, self.objective = op, arch, cons, objective
        self.classes = dim_classes(op)
        dims = op.dim_names
        self.sizes = np.array([op.sizes[d] for d in dims], dtype=np.int64)
        self.axes, self.options, self.mats, twins = axis_matrices(op, arch, cons, len(dims), "every")
        names = [a.name for _, a in self.axes]
        limit = 2 * self.sizes - 1          # what enumerate_spatial(pad="every") lets a dim's product reach
        column = [[dims.index(d) for d in members] for members in self.classes.members]
        fanouts = fanout_groups(arch, cons)
        self.groups: list[_GroupCombos] = []
        for fanout in fanouts:
            positions = [names.index(a) for a in fanout.axes]
            # interchangeable axes are alike in level, multicast and reduce: always in one group
            local = [None if (twin := twins[k]) is None else positions.index(twin) for k in positions]
            choice, used = _combinations([self.mats[k] for k in positions], limit, local, BOUND_COMBINATIONS)
            vec = np.stack([used[:, cols].prod(axis=1) for cols in column], axis=1) if column else \
                np.ones((len(used), 0), dtype=np.int64)
            vectors, inverse = np.unique(vec, axis=0, return_inverse=True)
            inverse = inverse.reshape(-1)
            order = np.argsort(inverse, kind="stable")
            starts = np.searchsorted(inverse[order], np.arange(len(vectors) + 1))
            max_used = np.ones((len(vectors), len(dims)), dtype=np.int64)
            np.maximum.at(max_used, inverse, used)
            self.groups.append(_GroupCombos(positions, choice, used, vectors, order, starts, max_used))
        class_limit = np.array([int(np.prod(limit[cols])) for cols in column], dtype=np.int64)
        self.picks, total = _combinations([G.vectors for G in self.groups], class_limit, max_rows=BOUND_COMBINATIONS)
        # per class row: how many members it may hold (before the whole-row checks), and whether one may pad a dim
        # past its size (rule S6 is then left out of its bound)
        self.counts = np.ones(len(self.picks), dtype=np.int64)
        reach = np.ones((len(self.picks), len(dims)), dtype=np.int64)
        for g, G in enumerate(self.groups):
            self.counts *= np.diff(G.starts)[self.picks[:, g]]
            reach *= G.max_used[self.picks[:, g]]
        loose = np.asarray((reach > self.sizes).any(axis=1))
        self.loose = loose
        groups = [(g.level, g.multicast, G.vectors) for g, G in zip(fanouts, self.groups, strict=True)]
        n = len(self.picks)
        self.energy, self.latency = np.empty(n), np.empty(n)
        self.pair_energy, self.pair_latency = np.empty(n), np.empty(n)
        for start in range(0, n, CERTIFICATE_CHUNK):
            # (the clock read when called: a benchmark may make time.perf_counter the CPU clock after this import)
            if deadline is not None and (clock or time.perf_counter)() > deadline:
                raise CertificateOutOfTime
            part = slice(start, start + CERTIFICATE_CHUNK)
            rows = class_vector_bounds(op, arch, cons, chains, objective, self.classes, groups, self.picks[part],
                                       total[part], loose[part])
            self.energy[part], self.latency[part] = rows.energy, rows.latency
            self.pair_energy[part], self.pair_latency[part] = rows.pair_energy, rows.pair_latency
        self.value = scalar(objective if objective != "pareto" else "edp", self.pair_energy, self.pair_latency)
        self.visit = np.argsort(self.value, kind="stable")
        self.next = 0
        self.cut = self.opened = 0

    def __len__(self) -> int:
        return len(self.picks)

    def cuts(self, best: TopK | ParetoFront, row: int) -> bool:
        """Whether the best found already meets class ``row``'s bound (a front: dominates its unpaired point)."""
        if isinstance(best, ParetoFront):
            return best.prunes(float(self.energy[row]), float(self.latency[row]))
        return best.prunes(float(self.pair_energy[row]), float(self.pair_latency[row]))

    def next_tier(self, best: TopK | ParetoFront) -> SpatialSpace | None:
        """The members of the next classes in bound order that ``best`` does not cut, at least ``TIER_ROWS`` of them
        unless the classes run out; None when every class left is cut or none is left."""
        rows: list[int] = []
        listed = 0
        while self.next < len(self.visit) and listed < TIER_ROWS:
            row = int(self.visit[self.next])
            if self.cuts(best, row):
                if self.objective != "pareto":
                    self.cut += len(self.visit) - self.next     # in bound order: no later class can win either
                    self.next = len(self.visit)
                    break
                self.cut += 1
                self.next += 1
                continue
            rows.append(row)
            listed += int(self.counts[row])
            self.next += 1
        if not rows:
            return None
        self.opened += len(rows)
        return self.members(np.array(rows, dtype=np.int64))

    def members(self, rows: np.ndarray) -> SpatialSpace:
        """Every unrolling of the every-padded space whose class row is one of ``rows``."""
        owner = rows                                    # per partial member, its class row
        parts: list[np.ndarray] = []                    # per group so far, each partial member's combo
        for g, G in enumerate(self.groups):
            vec = self.picks[owner, g]
            count = np.diff(G.starts)[vec]
            take = np.repeat(np.arange(len(owner)), count)
            offset = np.arange(len(take)) - np.repeat(np.cumsum(count) - count, count)
            parts = [p[take] for p in parts] + [G.order[G.starts[vec[take]] + offset]]
            owner = owner[take]
        D = len(self.sizes)
        choice = np.zeros((len(owner), len(self.axes)), dtype=np.int64)
        used = np.ones((len(owner), D), dtype=np.int64)
        for G, combo in zip(self.groups, parts, strict=True):
            choice[:, G.positions] = G.choice[combo]
            used *= G.used[combo]
        # the rows enumerate_spatial(pad="every") keeps: each dim's product below twice its size, a dim the output
        # does not use divided (a spatial reduction is complete), the least utilization the constraints ask
        is_out = np.array([d in self.op.output.dims for d in self.op.dim_names])
        pes = used.prod(axis=1)
        ok = (used <= 2 * self.sizes - 1).all(axis=1) & ((self.sizes % used == 0) | is_out).all(axis=1)
        if self.cons.min_utilization:
            ok &= pes >= self.cons.min_utilization * self.arch.num_pes
        choice, used, pes = choice[ok], used[ok], pes[ok]
        return SpatialSpace(self.axes, self.options, [self.mats[k][choice[:, k]] for k in range(len(self.axes))],
                            used, pes, choice)

    def row_of(self, spatial: dict[str, dict[str, int]]) -> int:
        """The class row of one unrolling given per axis ({axis: {dim: bound}}, ``spatial.unrolling_of``'s form)."""
        dims = self.op.dim_names
        want = []
        for G in self.groups:
            used = np.ones(len(dims), dtype=np.int64)
            for k in G.positions:
                for d, b in spatial.get(self.axes[k][1].name, {}).items():
                    used[dims.index(d)] *= b
            vec = np.array([used[[dims.index(d) for d in m]].prod() for m in self.classes.members], dtype=np.int64)
            hit = np.flatnonzero((G.vectors == vec).all(axis=1))
            if not len(hit):
                raise KeyError(f"no class vector {vec.tolist()} in group of axes {G.positions}")
            want.append(int(hit[0]))
        hit = np.flatnonzero((self.picks == np.array(want)).all(axis=1))
        if not len(hit):
            raise KeyError(f"no class row {want}")
        return int(hit[0])
