"""Exact analytical access counts of a mapped loop nest.

Semantics (docs/cost-model.md has the full statement; ``brute_force_counts.py`` is
the brute-force twin that runs the nest and must agree exactly):

* The tile of operand X at level c, for one instance of c at one time, is the
  set of X's index points touched by the valid iteration points of the loops
  at c and below, given the values of the loops above c.
* A buffer holds exactly its current tile. When the loops above c advance,
  the new tile replaces the old one and only new elements are transferred
  (delta fetch); elements in both stay (stationarity, sliding windows).
* Instances of c that differ only in spatial loops over dimensions that do
  not index X (on a multicast axis) form a group: the parent serves the group
  with one read per element. For the output, such loops reduce partial sums
  in the network: one update per group.
* The compute unit reads every input and the partial sum once per MAC per
  group (no stationarity without a register level), and writes one update.
* An output element's first touch in a reduction lineage writes without
  reading (``init_output = zero``); a lineage is a branch of a spatial
  reduction above the parent level.

Counting never runs the nest. Transitions of the loops above c are grouped by
the loop that advances; the tile change of every transition of one group
depends only on a per-dimension state (shift, clipped extents, emptiness),
whose histogram is computed per dimension. Perfectly factored dimensions have
a single state, so the common case costs a few multiplications per loop.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from accelmap.arch.accelerator import Accelerator
from accelmap.mapping.loopnest import Mapping, loop_strides
from accelmap.workload.index_sets import axis_mask, axis_overlap, axis_size
from accelmap.workload.operator import Operand, Operator


@dataclass(frozen=True)
class _L:
    idx: int        # position in the nest
    dim: str
    bound: int
    stride: int     # value of one step of this loop in its dimension
    level: int
    spatial: bool
    axis: str | None


class NestInfo:
    """Per-dimension view of a mapping, computed once per evaluation."""

    def __init__(self, op: Operator, m: Mapping, arch: Accelerator | None = None):
        self.op = op
        # ``arch`` places the loops on axes a level is shared along inside its tiles (``Accelerator.inside``)
        self.arch = arch
        self.generated = arch is not None and arch.padding_generated
        self.loops: list[_L] = []
        by_dim: dict[str, list[int]] = {d: [] for d in op.dim_names}
        for i, l in enumerate(m.loops):
            by_dim[l.dim].append(i)
        strides = loop_strides(m)
        for i, l in enumerate(m.loops):
            self.loops.append(_L(i, l.dim, l.bound, strides[i], l.level, l.spatial, l.axis))
        self.by_dim = {d: [self.loops[i] for i in idxs] for d, idxs in by_dim.items()}
        self.perfect = {d: math.prod(l.bound for l in self.by_dim[d]) == op.sizes[d] for d in op.dim_names}
        self.all_perfect = all(self.perfect.values())
        self._ext: dict[int, dict[str, int]] = {}
        self._axes: dict[str, list] = {}

    def inside(self, l: _L, c: int) -> bool:
        """Is loop ``l`` inside the tiles of level ``c`` (``Accelerator.inside``)?"""
        return l.level >= c if self.arch is None else self.arch.inside(c, l.level, l.axis)

    def inner_extent(self, d: str, level: int) -> int:
        return math.prod(l.bound for l in self.by_dim[d] if self.inside(l, level))

    def inner_extents(self, level: int) -> dict[str, int]:
        """Extent of every dimension inside ``level`` (clipped by nothing: perfect nests only)."""
        ext = self._ext.get(level)
        if ext is None:
            ext = dict.fromkeys(self.op.sizes, 1)
            for l in self.loops:
                if self.inside(l, level):
                    ext[l.dim] *= l.bound
            self._ext[level] = ext
        return ext

    def whole_points(self, X: Operand) -> tuple[int | None, ...]:
        """Per axis of X, the points a tile spanning that whole axis moves when the accelerator generates
        the halo (``padding: generated``): the stored rows; None where the halo moves (``stored_points``)."""
        if not self.generated:
            return (None,) * len(X.indices)
        return stored_points(X, tuple(tuple(self.op.sizes[d] for d, _ in ix.terms) for ix in X.indices))

    def axes_of(self, X: Operand) -> list:
        ax = self._axes.get(X.name)
        if ax is None:
            ax = [(tuple(cf for _, cf in ix.terms), tuple(d for d, _ in ix.terms)) for ix in X.indices]
            self._axes[X.name] = ax
        return ax


@lru_cache(maxsize=4096)
def stored_points(X: Operand, full: tuple[tuple[int, ...], ...]) -> tuple[int | None, ...]:
    """Per axis of X: the index points of the whole axis (its dims at their full sizes ``full``) that lie in
    the stored tensor, where some do not (a padded halo); None where every point is stored. With
    ``padding: generated`` a tile spanning the whole axis moves these only (docs/cost-model.md, rule 9)."""
    out: list[int | None] = []
    for k, ix in enumerate(X.indices):
        coeffs = tuple(cf for _, cf in ix.terms)
        mask = axis_mask(coeffs, full[k])
        lo = X.pad_lo[k] if X.pad_lo else 0
        n = X.shape[k] if X.shape else mask.bit_length()
        stored = ((mask >> lo) & ((1 << n) - 1)).bit_count()
        out.append(None if stored == mask.bit_count() else stored)
    return tuple(out)


# A per-dimension state of one transition: (shift, e_old, e_new, new_ok, fresh).
# e_* are clipped extents of the dimension inside the tile (<= 0: empty);
# new_ok: some member of the group has a non-empty range after the transition;
# fresh: some member that is non-empty after was empty before.
_State = tuple[int, int, int, bool, bool]


def _dim_states(loops: list[_L], j: int | None, E: int, D: int, perfect: bool,
                collapsed: frozenset[int]) -> Counter:
    """Histogram of the states of one dimension over the transitions advancing loop ``j``.

    ``j is None`` is the initial fill: temporal loops at zero, nothing resident.
    """
    first = j is None
    if perfect:
        shift, count = 0, 1
        for l in loops:
            if l.idx in collapsed:
                continue
            if l.spatial or (j is not None and l.idx < j):
                count *= l.bound
            elif not first and l.idx == j:
                count *= l.bound - 1
                shift += l.stride
            elif not first:
                shift -= (l.bound - 1) * l.stride
        return Counter({(shift, E, E, True, first): count}) if count else Counter()
    ranges, strides, fixed_old, adv_stride = [], [], 0, 0
    coll_offsets = [0]
    for l in loops:
        if l.idx in collapsed:
            coll_offsets = [o + i * l.stride for o in coll_offsets for i in range(l.bound)]
        elif l.spatial or (j is not None and l.idx < j):
            ranges.append(range(l.bound))
            strides.append(l.stride)
        elif not first and l.idx == j:
            ranges.append(range(l.bound - 1))
            strides.append(l.stride)
            adv_stride = l.stride
        elif not first:
            fixed_old += (l.bound - 1) * l.stride
    hist: Counter = Counter()
    for vals in itertools.product(*ranges):
        base = sum(v * s for v, s in zip(vals, strides, strict=True))
        b_new = base + adv_stride
        b_old = base + fixed_old
        e_new = min(E, D - b_new)
        if first:
            e_old, fresh = 0, e_new > 0
        else:
            e_old = min(E, D - b_old)
            fresh = any(b_old + o >= D > b_new + o for o in coll_offsets)
        new_ok = e_new > 0
        hist[(b_new - b_old if not first else 0, e_old, e_new, new_ok, fresh)] += 1
    return hist


def entering(info: NestInfo, X: Operand, c: int, collapsed: frozenset[int] = frozenset()) -> int:
    """Elements entering the tiles of X at level c over the whole run.

    Summed over instances of c, with the instances that differ only in the
    ``collapsed`` loops (spatial, over dimensions that do not index X)
    counted once as a group.
    """
    op = info.op
    temporal_above = [l.idx for l in info.loops if l.level < c and not l.spatial]
    xdims = X.dims
    axes = [(tuple(cf for _, cf in ix.terms), tuple(d for d, _ in ix.terms)) for ix in X.indices]
    whole = [None if w is None else (w, {d: op.sizes[d] for d in dims})
             for w, (_, dims) in zip(info.whole_points(X), axes, strict=True)]
    ext = {d: info.inner_extent(d, c) for d in op.dim_names}
    outer = {d: [l for l in info.by_dim[d] if not info.inside(l, c)] for d in op.dim_names}
    total = 0
    for j in [None] + temporal_above:
        # A transition of a loop over a dim outside X that moves nothing in X
        # and empties nothing changes no tile: skip it without building states.
        if j is not None:
            jd = info.loops[j].dim
            if jd not in xdims and info.perfect[jd]:
                resets = [l for l in info.loops if l.idx > j and l.idx in temporal_above and l.bound > 1]
                if all(l.dim not in xdims and info.perfect[l.dim] for l in resets):
                    continue
        per_dim = []
        for d in op.dim_names:
            h = _dim_states(outer[d], j, ext[d], op.sizes[d], info.perfect[d], collapsed)
            if not h:
                break
            if d not in xdims:
                # Only emptiness of a dimension X does not use matters.
                h2: Counter = Counter()
                for (_, _, _, ok, fr), n in h.items():
                    h2[(0, 1, 1, ok, fr)] += n
                h = h2
            per_dim.append((d, list(h.items())))
        else:
            total += _sum_deltas(per_dim, axes, whole)
    return total


def _sum_deltas(per_dim, axes, whole=None) -> int:
    """Elements entering over the transitions of ``per_dim``'s state combinations. ``whole``: per axis,
    (stored points, full size of each of its dims) where a tile spanning the whole axis moves only its
    stored points (``NestInfo.whole_points``), else None."""
    names = [d for d, _ in per_dim]
    total = 0
    for combo in itertools.product(*(states for _, states in per_dim)):
        count = 1
        ok, fresh = True, False
        for (st, n) in combo:
            count *= n
            ok = ok and st[3]
            fresh = fresh or st[4]
        if not ok or not count:
            continue
        state = {d: st for d, (st, _) in zip(names, combo, strict=True)}
        spans = [w is not None and all(state[d][2] == w[1][d] for d in dims)
                 for w, (_, dims) in zip(whole or [None] * len(axes), axes, strict=True)]
        new = 1
        for (coeffs, dims), w, span in zip(axes, whole or [None] * len(axes), spans, strict=True):
            new *= w[0] if span else axis_size(coeffs, tuple(max(state[d][2], 0) for d in dims))
        if fresh:
            total += count * new
            continue
        if all(state[d][0] == 0 and state[d][1] == state[d][2] for dims in (a[1] for a in axes) for d in dims):
            continue
        overlap = 1
        for (coeffs, dims), w, span in zip(axes, whole or [None] * len(axes), spans, strict=True):
            if span and all(state[d][0] == 0 and state[d][1] == w[1][d] for d in dims):
                overlap *= w[0]       # the whole axis stays: its stored points
            else:
                overlap *= axis_overlap(coeffs, tuple(state[d][1] for d in dims),
                                        tuple(state[d][2] for d in dims), tuple(state[d][0] for d in dims))
            if not overlap:
                break
        total += count * (new - overlap)
    return total


def compute_groups(info: NestInfo, collapsed: frozenset[int]) -> int:
    """(time step, group) pairs with at least one valid MAC, for the given collapsed loops."""
    op = info.op
    if info.all_perfect:
        return math.prod(l.bound for l in info.loops if l.idx not in collapsed)
    total = 1
    for d in op.dim_names:
        loops = info.by_dim[d]
        D = op.sizes[d]
        if info.perfect[d]:
            total *= math.prod(l.bound for l in loops if l.idx not in collapsed)
            continue
        free = [l for l in loops if l.idx not in collapsed]
        n = sum(1 for vals in itertools.product(*(range(l.bound) for l in free))
                if sum(v * l.stride for v, l in zip(vals, free, strict=True)) < D)
        total *= n
    return total


def entering_perfect(info: NestInfo, X: Operand, c: int, collapsed: frozenset[int] = frozenset()) -> int:
    """``entering`` for a perfectly factored nest, in closed form.

    With no partial tiles every transition of loop j moves X's tile by a fixed
    shift per dimension: +stride on j's dimension and minus the span of the
    temporal loops that wrap back to zero inside j. A single-dimension axis
    then either stays or moves by at least its extent; only sliding-window
    axes (p + r) overlap partially.
    """
    xdims = X.dims
    inst = 1
    temporal = []
    for l in info.loops:
        if l.level >= c:
            break
        if info.inside(l, c):       # on an axis the level is shared along: part of its tile
            continue
        if l.spatial:
            if l.idx not in collapsed:
                inst *= l.bound
        elif l.bound > 1:
            temporal.append(l)
    axes = info.axes_of(X)
    ext = info.inner_extents(c)
    # a tile spanning a whole padded axis moves its stored points only (``padding: generated``); no loop
    # above c moves such an axis, so it overlaps whole at every transition
    stored = [w if w is not None and all(ext[d] == info.op.sizes[d] for d in dims) else None
              for w, (_, dims) in zip(info.whole_points(X), axes, strict=True)]
    tile = 1
    for (coeffs, dims), w in zip(axes, stored, strict=True):
        tile *= w if w is not None else axis_size(coeffs, tuple(ext[d] for d in dims))
    total = tile
    if temporal:
        # Walk inner to outer: ``resets`` holds the wrap-back of the loops inside j.
        prefix = [1]
        for l in temporal:
            prefix.append(prefix[-1] * l.bound)
        resets: dict[str, int] = {}
        for n in range(len(temporal) - 1, -1, -1):
            l = temporal[n]
            moved = l.dim in xdims or any(resets.get(d, 0) for d in xdims)
            if moved:
                count = prefix[n] * (l.bound - 1)
                overlap = 1
                for (coeffs, dims), w in zip(axes, stored, strict=True):
                    if w is not None:
                        overlap *= w
                        continue
                    if len(dims) == 1:
                        d = dims[0]
                        sh = resets.get(d, 0) + (l.stride if d == l.dim else 0)
                        if sh:
                            overlap = 0
                            break
                        overlap *= ext[d]
                    else:
                        shifts = tuple(resets.get(d, 0) + (l.stride if d == l.dim else 0) for d in dims)
                        e = tuple(ext[d] for d in dims)
                        overlap *= axis_overlap(coeffs, e, e, shifts)
                        if not overlap:
                            break
                total += count * (tile - overlap)
            if l.dim in xdims:
                resets[l.dim] = resets.get(l.dim, 0) - (l.bound - 1) * l.stride
    return inst * total
