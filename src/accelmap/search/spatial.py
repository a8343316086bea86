"""Spatial unrollings: which dims each fan-out axis unrolls, enumerated and ranked by a lower bound.

The spatial unrolling decides most of a mapping's cost on an array (on a 32x32 weight-stationary
array, the reduction dim on the reducing axis against an output dim there is a 30-400x EDP
difference), so the heuristic does not guess it from the PEs it uses: it enumerates the
candidates, bounds each one from below (``bounds.spatial_bounds``: the cost of every mapping
with that unrolling, whatever its tiling, order and bypass) and searches them in order of that
bound, skipping those whose bound cannot beat what it has found.

A candidate is ``{(level, axis): {dim: bound}}``. Per axis: up to ``max_dims`` dims, each with a
bound that divides it, or, for a dim of the output, a bound that splits it into whole rounds as
evenly as the axis allows (ceil(size / rounds); the last round partial, as ZigZag pads). A dim that
does not index the output only goes on axes that reduce, and divides (the reduction is complete).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.sampling import divisors
from accelmap.mapping.validate import shared_axis_dims
from accelmap.search.bounds import (
    combined_spatial_bounds,
    loose_operand,
    operand_chain_terms,
    serial_fill_levels,
    spatial_bounds,
)
from accelmap.search.combination_pairs import CombinationPairs
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC
from accelmap.search.objective import scalar
from accelmap.search.padded_schedule import class_schedule, dim_schedule
from accelmap.search.pinned_cases import PinnedCases
from accelmap.search.pinned_stall import PinnedStall, class_pinned_stall, dim_pinned_stall, level_unrolling
from accelmap.search.space import Constraints
from accelmap.search.unrolling_fit import class_chain_fits, unrolling_chain_fits
from accelmap.search.unrolling_refills import RefillCases
from accelmap.search.unrolling_stall import stall_terms
from accelmap.workload.operator import Operator

# Defaults from the heuristic's knobs (heuristic_config.py says what they mean).
MAX_DIMS_PER_AXIS = DEFAULT_HEURISTIC.max_dims_per_axis
MIN_PE_FRACTION = DEFAULT_HEURISTIC.min_pe_fraction


@dataclass(frozen=True)
class SpatialCandidate:
    assignment: dict              # {(level, axis): {dim: bound}}
    pes: int                      # PEs it unrolls over
    energy_bound: float           # pJ, every mapping with this unrolling costs at least this
    latency_bound: float          # cycles, likewise

    def bound(self, objective: str) -> float:
        return scalar(objective if objective != "pareto" else "edp", self.energy_bound, self.latency_bound)


def axis_bounds(size: int, axis_size: int, may_pad: bool | str) -> list[int]:
    """Bounds > 1 one dim of ``size`` can take on an axis of ``axis_size``: its divisors, and where it may pad
    the fewest-rounds bound (``may_pad`` "every": every bound up to the axis and the dim, the last round
    partial)."""
    out = [b for b in divisors(size) if 1 < b <= axis_size]
    if may_pad == "every":
        out += [b for b in range(2, min(size, axis_size) + 1) if size % b]
    elif may_pad and size > 1:
        b = -(-size // -(-size // axis_size))      # the fewest rounds, as even as they can be
        if 1 < b <= axis_size and b not in out:
            out.append(b)
    return out


def axis_options(op: Operator, size: int, reduce: bool, max_dims: int, pad: bool | str) -> list[dict[str, int]]:
    """Every assignment {dim: bound} of up to ``max_dims`` dims whose product fits the axis."""
    dims = [d for d in op.dim_names if d in op.output.dims or reduce]
    per_dim = {d: axis_bounds(op.sizes[d], size, pad if d in op.output.dims else False) for d in dims}
    out: list[dict[str, int]] = [{}]
    for n in range(1, max_dims + 1):
        for chosen in itertools.combinations(dims, n):
            for bounds in itertools.product(*(per_dim[d] for d in chosen)):
                if math.prod(bounds) <= size:
                    out.append(dict(zip(chosen, bounds, strict=True)))
    return out


@dataclass
class SpatialSpace:
    """Every valid candidate as rows: the option each axis takes, the per-axis bound matrices."""
    axes: list                    # [(level, FanoutAxis)]
    options: list                 # per axis: list of {dim: bound}
    per_axis: list                # per axis: bounds[row, dim]
    used: np.ndarray              # product over axes, [row, dim]
    pes: np.ndarray               # [row]
    choice: np.ndarray            # [row, axis]: index into that axis' options

    def assignment(self, row: int) -> dict:
        return {(i, a.name): self.options[k][self.choice[row, k]] for k, (i, a) in enumerate(self.axes)}


# Unrolling vectors ``certified_lower_bound`` combines at most (each step at most 8x as many rows in flight).
BOUND_COMBINATIONS = 500_000


class TooManyUnrollings(Exception):
    """``enumerate_spatial`` stopped: the candidates would pass its ``max_rows``."""


def _combinations(options: list[np.ndarray], limits: np.ndarray,
                  twins: list[int | None] | None = None, max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every choice of one row of each ``options[k]`` (a [rows, columns] matrix) whose column-wise
    product stays within ``limits``: the choices as [row, k] indices, and the products. ``twins[k] = j``
    keeps only choices whose index at k is at least the one at j (interchangeable options). Raises
    TooManyUnrollings before a step would hold more than 8 x ``max_rows`` rows or keep more than ``max_rows``."""
    choice = np.zeros((1, 0), dtype=np.int64)
    total = np.ones((1, len(limits)), dtype=np.int64)
    for k, mat in enumerate(options):
        if max_rows is not None and (len(choice) * len(mat) > 8 * max_rows or len(choice) > max_rows):
            raise TooManyUnrollings
        rows = np.repeat(np.arange(len(choice)), len(mat))
        cols = np.tile(np.arange(len(mat)), len(choice))
        new_total = total[rows] * mat[cols]
        keep = (new_total <= limits).all(axis=1)
        if twins is not None and twins[k] is not None:
            keep &= cols >= choice[rows, twins[k]]
        choice = np.concatenate([choice[rows[keep]], cols[keep, None]], axis=1)
        total = new_total[keep]
    return choice, total


def group_merges(op: Operator, nlev: int, groups: list[tuple[int, bool, np.ndarray]],
                 used: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What ``bounds.spatial_bounds`` takes: per operand, [row, level], the product of the spatial
    bounds at each level's fan-out over the columns (dims, or classes of dims) the operand does not
    use, on the axes that merge it (multicast for inputs; every axis for the output, whose other
    dims can only sit on reducing axes). ``groups``: (level, multicast, bounds[row, column]);
    ``used``: per operand, which columns it uses."""
    rows = len(groups[0][2]) if groups else 1
    out = {}
    for X in op.operands:
        M = np.ones((rows, nlev), dtype=np.float64)
        for lvl, multicast, B in groups:
            if multicast or X.is_output:
                M[:, lvl] *= np.where(used[X.name], 1, B).prod(axis=1)
        out[X.name] = M
    return out


def fanout_products(space: SpatialSpace) -> np.ndarray:
    """[row, group x dim]: per fan-out level and multicast flag (the groups, in sorted order), the product of
    each dim's bounds over that level's axes with that flag. The cost model reads an unrolling through nothing
    else (rule S5 of docs/mapper.md), so rows with equal products are one tiling problem with one optimum."""
    groups = sorted({(lvl, a.multicast) for lvl, a in space.axes})
    D = space.used.shape[1]
    out = np.ones((len(space.pes), len(groups) * D), dtype=np.int64)
    for k, (lvl, a) in enumerate(space.axes):
        g = groups.index((lvl, a.multicast))
        out[:, g * D:(g + 1) * D] *= space.per_axis[k]
    return out


def row_classes(matrix: np.ndarray) -> tuple[np.ndarray, int]:
    """Per row of an integer matrix, the index of its class of equal rows, and the number of classes. Each column
    is coded by ``np.unique`` and the codes combined in mixed radix, re-coded whenever the radix would pass 2^62:
    a few one-dimensional sorts, where ``np.unique(axis=0)`` sorts rows field by field (1-2 s on the 3x10^5
    unrollings of an edge_tpu_like layer)."""
    n = len(matrix)
    key = np.zeros(n, dtype=np.int64)
    radix = 1
    for col in matrix.T:
        values, code = np.unique(col, return_inverse=True)
        if radix * len(values) >= 1 << 62:
            uniq, key = np.unique(key, return_inverse=True)
            radix = len(uniq)
        key = key * len(values) + code.reshape(-1)
        radix *= len(values)
    uniq, inverse = np.unique(key, return_inverse=True)
    return inverse.reshape(-1), len(uniq)


def dims_used(op: Operator) -> dict[str, np.ndarray]:
    return {X.name: np.array([d in X.dims for d in op.dim_names]) for X in op.operands}


def spatial_lower_bound(op: Operator, arch: Accelerator, spatial: tuple[Loop, ...],
                        chains: dict[str, list[list[int]]],
                        ranking: list[np.ndarray] | None = None) -> tuple[float, float]:
    """``bounds.spatial_bounds`` of the one unrolling whose spatial loops are ``spatial`` (``ranking``: as there, gets
    the latency E1 ranks it by)."""
    return UnrollingTerms(op, arch, spatial, chains).bound(ranking=ranking)


class UnrollingTerms:
    """What ``bounds.spatial_bounds`` takes for the one unrolling whose spatial loops are ``spatial``, under the level
    sets ``chains``: the merges, PEs and MAC schedule (functions of the unrolling alone) and, per operand and level
    set, rule S6's fits, rule S7's stall vector and rule B24/B33's pinned entries. Each of those is a function of its
    own level set (and the unrolling), not of the other sets listed, as are ``spatial_bounds``' per-operand terms
    (``bounds.operand_chain_terms``), so ``bound`` can combine any one pick of them: the bound of one bypass choice
    (rule S1 per choice, ``optimal._keeps_by_bound``) equals ``spatial_lower_bound`` with that choice's chains alone,
    to the bit, with the parts computed once for all."""

    def __init__(self, op: Operator, arch: Accelerator, spatial: tuple[Loop, ...], chains: dict[str, list[list[int]]]):
        dims = op.dim_names
        groups, axes = [], []
        for l in spatial:
            B = np.ones((1, len(dims)), dtype=np.int64)
            B[0, dims.index(l.dim)] = l.bound
            axes.append((l.level, arch.fanout_axis(l.level, l.axis)))
            groups.append((l.level, axes[-1][1].multicast, B))
        self.chains = chains
        self.pes = np.array([math.prod(l.bound for l in spatial)], dtype=np.float64)
        self.fits = unrolling_chain_fits(op, arch, axes, [B for _, _, B in groups], 1, chains)     # rule S6
        self.merges = group_merges(op, len(arch.levels), groups, dims_used(op))
        used = np.prod([B for _, _, B in groups], axis=0) if groups else np.ones((1, len(dims)), dtype=np.int64)
        schedule = dim_schedule(op, arch.compute.macs_per_cycle, used)                          # rule B32
        self.stall = stall_terms(op, arch, self.pes, chains, schedule)                           # rule S7
        self.pinned = _dim_pinned(op, arch, chains, groups, used, self.merges)                  # rule B24
        self.op, self.arch, self.names = op, arch, [X.name for X in op.operands]
        # per operand, per level set: its energy, traffic and port time (``bounds.operand_chain_terms``)
        self.terms = operand_chain_terms(op, arch, self.merges, 1, chains, self.fits)

    def bound(self, pick: dict[str, int] | None = None,
              ranking: list[np.ndarray] | None = None) -> tuple[float, float]:
        """(energy, latency) of ``spatial_bounds`` over every level set, or with ``pick`` (per operand an index into its
        ``chains``) over that one set per operand (``ranking``, over every level set only: as in ``spatial_bounds``)."""
        if pick is None:
            e, lat = combined_spatial_bounds(self.op, self.arch, self.pes, self.terms, self.stall, self.pinned,
                                             None, ranking)
        else:
            js = [pick[name] for name in self.names]
            e, lat = combined_spatial_bounds(
                self.op, self.arch, self.pes, [[per_set[j]] for per_set, j in zip(self.terms, js, strict=True)],
                (self.stall[0], {name: [self.stall[1][name][j]] for name, j in zip(self.names, js, strict=True)}),
                _PickedPinned(self.pinned, js))
        return float(e[0]), float(lat[0])


class _PickedPinned(PinnedStall):
    """A ``PinnedStall`` over every level set seen through one pick of them: ``spatial_bounds`` given one set per
    operand asks for the combination (0, ..., 0), which is the pick's."""

    def __init__(self, pinned: PinnedStall, pick: list[int]):
        self.pinned, self.pick = pinned, tuple(pick)

    def cases(self, index: tuple[int, ...]) -> list[tuple[np.ndarray | None, np.ndarray]]:
        assert not any(index), index
        return self.pinned.cases(self.pick)


def keep_lower_bounds(op: Operator, arch: Accelerator, spatial: tuple[Loop, ...],
                      keeps: list[tuple[frozenset[str], ...]]) -> list[tuple[float, float]]:
    """``spatial_lower_bound`` of each bypass choice of ``keeps`` (rule B6) under the one unrolling ``spatial``, the same
    values: each operand's distinct level sets are listed once and their parts computed once (``UnrollingTerms``)."""
    sets: dict[str, list[list[int]]] = {X.name: [] for X in op.operands}
    picks = []
    for keep in keeps:
        pick = {}
        for X in op.operands:
            chain = [i for i, kp in enumerate(keep) if X.name in kp]
            if chain not in sets[X.name]:
                sets[X.name].append(chain)
            pick[X.name] = sets[X.name].index(chain)
        picks.append(pick)
    terms = UnrollingTerms(op, arch, spatial, sets)
    return [terms.bound(pick) for pick in picks]


def _dim_pinned(op: Operator, arch: Accelerator, chains: dict[str, list[list[int]]],
                groups: list[tuple[int, bool, np.ndarray]], used: np.ndarray,
                merges: dict[str, np.ndarray]) -> PinnedStall:
    """Rules B24 (``pinned_stall``) and B33 (``pinned_cases``) for unrollings given per dim: ``groups`` (level,
    multicast, bounds[row, dim])."""
    level_pes = level_unrolling(len(arch.levels), [(lvl, B) for lvl, _, B in groups], len(used))
    serial = serial_fill_levels(arch)
    stall = dim_pinned_stall(op, arch, chains, serial, loose_operand, used, level_pes, merges)
    return RefillCases(PinnedCases(stall, op, arch, chains, serial, loose_operand, merges, level_pes,
                                   np.array([op.sizes[d] > 1 for d in op.dim_names])),
                       op, arch, chains, merges, level_pes)                                  # rule B64


def axis_matrices(op: Operator, arch: Accelerator, cons: Constraints, max_dims: int,
                  pad: bool | str) -> tuple[list, list[list[dict[str, int]]], list[np.ndarray], list[int | None]]:
    """What ``enumerate_spatial`` combines: the fan-out axes [(level, FanoutAxis)], each axis' options ({dim: bound};
    an axis ``cons.spatial`` fixes has its one), the options as bounds[option, dim], and per axis the earlier axis it
    is interchangeable with (same level, size, multicast and reduce, both free), or None."""
    dims = op.dim_names
    axes = [(i, a) for i, lv in enumerate(arch.levels) if lv.fanout for a in lv.fanout.axes]
    options: list[list[dict[str, int]]] = []
    mats = []
    for _, a in axes:
        if a.name in cons.spatial:
            opts = [{d: b for d, b in cons.spatial[a.name].items() if b > 1}]
        else:
            # a level shared along the axis holds one tile for the whole axis (validate.shared_axis_dims)
            banned = shared_axis_dims(op, arch, a.name)
            opts = [o for o in axis_options(op, a.size, a.reduce, max_dims, pad) if not banned & set(o)]
        options.append(opts)
        mat = np.ones((len(opts), len(dims)), dtype=np.int64)
        for r, o in enumerate(opts):
            for d, b in o.items():
                mat[r, dims.index(d)] = b
        mats.append(mat)
    # Interchangeable axes: an assignment and its mirror image cost the same; keep one of them.
    twins: list[int | None] = []
    for k, (lvl, a) in enumerate(axes):
        alike = [j for j in range(k) if axes[j][0] == lvl and a.name not in cons.spatial
                 and axes[j][1].name not in cons.spatial
                 and (axes[j][1].size, axes[j][1].multicast, axes[j][1].reduce) == (a.size, a.multicast, a.reduce)]
        twins.append(alike[-1] if alike else None)
    return axes, options, mats, twins


def enumerate_spatial(op: Operator, arch: Accelerator, cons: Constraints, *,
                      max_dims: int = MAX_DIMS_PER_AXIS, pad: bool | str = True,
                      min_pe_fraction: float = 0.0, max_rows: int | None = None) -> SpatialSpace:
    """Every valid candidate; axes fixed by ``cons.spatial`` take that assignment. Of axes that are
    interchangeable (same level, size, multicast and reduce), one ordering of their assignments
    stands for all. Candidates below ``min_pe_fraction`` of the fullest one's PEs are left out.
    ``pad``: output dims may pad (True: with the fewest-rounds bound per axis; "every": with any bound, and a
    padded dim split over several axes is kept whatever its temporal loops, which the exact search places
    itself; False: no padding). ``max_rows``: raise TooManyUnrollings rather than build more candidates than that."""
    dims = op.dim_names
    sizes = np.array([op.sizes[d] for d in dims], dtype=np.int64)
    is_out = np.array([d in op.output.dims for d in dims])
    fixed_dims = np.array([any(d in ax for ax in cons.spatial.values()) for d in dims])
    axes, options, mats, twins = axis_matrices(op, arch, cons, max_dims, pad)
    # A dim split over several axes covers it with whole rounds of the inner axes: its product stays below the dim,
    # or, with any padded bound, below size + inner bound - 1 < 2 x size (the outer axis takes at most
    # ceil(size / inner) rounds; the exact search keeps only the placements the validator accepts).
    choice, used = _combinations(mats, sizes if pad != "every" else 2 * sizes - 1, twins, max_rows)
    if max_rows is not None and len(choice) > max_rows:
        raise TooManyUnrollings
    divides = sizes % used == 0
    # A padded dim: an output dim whose unrolling does not exceed it (every PE has work in the first
    # round); a fixed unrolling may pad where a free choice would not.
    may_pad = is_out & (bool(pad) | fixed_dims)
    ok = (divides | may_pad).all(axis=1)
    # Each loop's last iteration must start inside its dim (mapping.validate). The spatial loops are
    # emitted in axis order, and the temporal loops below may take the whole remainder ceil(N / used),
    # so an axis' last iteration starts at (b - 1) x (the bounds of later axes) x that remainder. One
    # padded axis always passes (its bound is as even as the rounds allow); a padded dim split over
    # several axes can fail (K=256 as 14 on X then 2 on Y leaves 10, and 13 x 2 x 10 = 260 >= 256).
    # A dim the constraints alone unroll is the user's choice and is left as it is.
    rem = -(-sizes // used)
    inner = np.ones_like(used)
    starts_outside = np.zeros_like(used, dtype=bool)
    free_use = np.zeros_like(used, dtype=bool)
    for k in reversed(range(len(axes))):
        B = mats[k][choice[:, k]]
        starts_outside |= (B - 1) * inner * rem >= sizes
        if axes[k][1].name not in cons.spatial:
            free_use |= B > 1
        inner = inner * B
    if pad != "every":
        ok &= ~(starts_outside & free_use).any(axis=1)
    pes = used.prod(axis=1)
    if cons.min_utilization:
        ok &= pes >= cons.min_utilization * arch.num_pes
    if ok.any():
        ok &= pes >= pes[ok].max() * min_pe_fraction
    choice, used, pes = choice[ok], used[ok], pes[ok]
    per_axis = [mats[k][choice[:, k]] for k in range(len(axes))]
    return SpatialSpace(axes, options, per_axis, used, pes, choice)


def unrolling_bounds(op: Operator, arch: Accelerator, space: SpatialSpace,
                     chains: dict[str, list[list[int]]], objective: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rule S1 (+S3) of every row of ``space``, each operand's level sets restricted to those that can hold its
    smallest tile under the row's unrolling (rule S6), the latency raised by single-buffered loads (rule S7), by
    one-element levels (rule B24) and by single-buffered levels' least refills (rule B64). With a scalar ``objective``
    each combination of level sets keeps its energy and latency together (rule B25): the pair per row is then a bound
    of that objective only."""
    return _unrolling_bounds(op, arch, space, chains, objective, None)


def ranked_unrolling_bounds(op: Operator, arch: Accelerator, space: SpatialSpace,
                            chains: dict[str, list[list[int]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``unrolling_bounds`` (unpaired) and, from the same pass, the latency per row without rule B64's refill stall:
    E1 orders unrollings by that (``exact.rank_space``) and cuts by the bound."""
    ranking: list[np.ndarray] = []
    energy, latency = _unrolling_bounds(op, arch, space, chains, None, ranking)
    return energy, latency, ranking[0]


def _unrolling_bounds(op: Operator, arch: Accelerator, space: SpatialSpace, chains: dict[str, list[list[int]]],
                      objective: str | None, ranking: list[np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
    groups = [(lvl, axis.multicast, B) for (lvl, axis), B in zip(space.axes, space.per_axis, strict=True)]
    merges = group_merges(op, len(arch.levels), groups, dims_used(op))
    fits = unrolling_chain_fits(op, arch, space.axes, space.per_axis, len(space.pes), chains)
    pes = space.pes.astype(np.float64)
    pairs = CombinationPairs(objective)
    schedule = dim_schedule(op, arch.compute.macs_per_cycle, space.used)                    # rule B32
    bounds = spatial_bounds(op, arch, merges, pes, chains, fits, stall_terms(op, arch, pes, chains, schedule),
                            _dim_pinned(op, arch, chains, groups, space.used, merges), pairs, ranking)
    return pairs.rows() if pairs.done else bounds


def ranked_spatial(op: Operator, arch: Accelerator, cons: Constraints, chains: dict[str, list[list[int]]],
                   objective: str, *, max_dims: int = MAX_DIMS_PER_AXIS, pad: bool = True,
                   min_pe_fraction: float = MIN_PE_FRACTION, limit: int = 256,
                   tied: int = 1) -> list[SpatialCandidate]:
    """Up to ``limit`` candidates with their lower bounds, the most promising first. Candidates with
    the same bound (the same merges per level and operand, the same PEs) are ranked among themselves by
    PEs; the first ``tied`` of each bound come before the next of any, so that ties do not all go to one
    kind of unrolling. (With ``tied`` 1, a bound's second unrolling can fall past ``limit``: on a fan-out
    that neither multicasts nor reduces, splitting tokens or channels over it has one bound, and which is
    better depends on what the buffers above keep, which the bound does not see.)"""
    space = enumerate_spatial(op, arch, cons, max_dims=max_dims, pad=pad, min_pe_fraction=min_pe_fraction)
    if not len(space.pes):
        return []
    # Ranked without rule B64's refill stall, as E1 (``exact.rank_space``); each candidate carries the bound.
    energy, latency, ranking = ranked_unrolling_bounds(op, arch, space, chains)
    values = scalar(objective if objective != "pareto" else "edp", energy, ranking)
    _, group = np.unique(np.stack([energy, ranking], axis=1), axis=0, return_inverse=True)
    group = group.reshape(-1)
    order = np.lexsort((-space.pes, group))
    starts = np.searchsorted(group[order], np.arange(group.max() + 1))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order)) - starts[group[order]]
    pick = np.lexsort((-space.pes, values, rank // tied))[:limit]
    return [SpatialCandidate(space.assignment(int(r)), int(space.pes[r]), float(energy[r]), float(latency[r]))
            for r in pick]


def _vectors(values: list[list[int]], size: int) -> np.ndarray:
    """Every vector v (one entry per class) with v[c] in ``values[c]`` and prod(v) <= size."""
    rows = np.ones((1, len(values)), dtype=np.int64)
    prod = np.ones(1, dtype=np.int64)
    for c, vals in enumerate(values):
        parts_rows, parts_prod = [rows], [prod]
        for v in vals:
            if v == 1:
                continue
            sel = prod * v <= size
            if not sel.any():
                break
            r = rows[sel].copy()
            r[:, c] = v
            parts_rows.append(r)
            parts_prod.append(prod[sel] * v)
        rows, prod = np.concatenate(parts_rows), np.concatenate(parts_prod)
    return rows


def class_values(op: Operator, dims: list[str], reduced: bool, limit: int) -> list[int]:
    """Sorted values up to ``limit`` one class of dims can unroll to: for output dims any integer up to
    the class size (a padded unrolling may take any bound); for reduced dims, products of divisors
    (a spatial reduction is complete)."""
    if not reduced:
        return list(range(1, min(limit, math.prod(op.sizes[d] for d in dims)) + 1))
    vals = {1}
    for d in dims:
        vals = {v * b for v in vals for b in divisors(op.sizes[d]) if v * b <= limit}
    return sorted(vals)


# Rows of rule S2's combinations bounded per chunk of ``certified_lower_bound`` (the clock is read between chunks;
# about 0.2 s of CPU per chunk on ascend_like's BERT attention.scores, 383,554 rows in all).
CERTIFICATE_CHUNK = 20_000


class CertificateOutOfTime(Exception):
    """``certified_lower_bound`` passed its deadline before every combination was bounded."""


@dataclass(frozen=True)
class DimClasses:
    """Rule S2's classes of dims: the dims of size above 1 that the same operands use (a convolution's N, P and Q
    form one), each class's dims (``members``), the operands using it (``keys``) and its size (``budgets``)."""
    members: list[list[str]]
    keys: list[frozenset[str]]
    budgets: list[int]

    @property
    def class_of(self) -> dict[str, int]:
        return {d: c for c, dims in enumerate(self.members) for d in dims}

    def used(self, op: Operator) -> dict[str, np.ndarray]:
        """Per operand, which classes it uses."""
        return {X.name: np.array([X.name in k for k in self.keys]) for X in op.operands}


def dim_classes(op: Operator) -> DimClasses:
    dims = [d for d in op.dim_names if op.sizes[d] > 1]
    keys = sorted({frozenset(X.name for X in op.operands if d in X.dims) for d in dims}, key=sorted)
    members = [[d for d in dims if frozenset(X.name for X in op.operands if d in X.dims) == k] for k in keys]
    return DimClasses(members, keys, [math.prod(op.sizes[d] for d in dims) for dims in members])


@dataclass(frozen=True)
class FanoutGroup:
    """One group of rule S2: an axis the constraints fix, or a fan-out level's free axes alike in multicast and
    reduce (``axes`` their names, ``size`` the product of their sizes)."""
    level: int
    multicast: bool
    reduce: bool
    axes: tuple[str, ...]
    size: int
    fixed: bool


def fanout_groups(arch: Accelerator, cons: Constraints) -> list[FanoutGroup]:
    groups: list[FanoutGroup] = []
    for lvl, lv in enumerate(arch.levels):
        if lv.fanout is None:
            continue
        free: dict[tuple[bool, bool], list] = {}
        for a in lv.fanout.axes:
            if a.name in cons.spatial:
                groups.append(FanoutGroup(lvl, a.multicast, a.reduce, (a.name,), a.size, True))
            else:
                free.setdefault((a.multicast, a.reduce), []).append(a)
        for (multicast, reduce), axes in free.items():
            groups.append(FanoutGroup(lvl, multicast, reduce, tuple(a.name for a in axes),
                                      math.prod(a.size for a in axes), False))
    return groups


@dataclass(frozen=True)
class ClassRowBounds:
    """Rule S1 of rows of class vectors (``class_vector_bounds``): the least energy and latency per row, and the pair
    per row that stands for a scalar objective (rule B25; the unpaired ones where nothing is paired). Rows the
    constraints' least utilization rules out are infinite."""
    energy: np.ndarray
    latency: np.ndarray
    pair_energy: np.ndarray
    pair_latency: np.ndarray


def class_vector_bounds(op: Operator, arch: Accelerator, cons: Constraints, chains: dict[str, list[list[int]]],
                        objective: str, classes: DimClasses, groups: list[tuple[int, bool, np.ndarray]],
                        picks: np.ndarray, total: np.ndarray, loose_fit: np.ndarray | None = None) -> ClassRowBounds:
    """Rule S1 of every row of class vectors: row r takes ``groups[g]``'s vector ``picks[r, g]`` (``groups``: (level,
    multicast, vectors[n, class])), ``total`` [row, class] each class's product over the groups. ``loose_fit``: rows
    where rule S6 leaves no level set out (``padded_classes``: rows some member of which pads a dim past its size)."""
    pes = total.prod(axis=1).astype(np.float64)
    chosen = [(lvl, multicast, vecs[picks[:, g]]) for g, (lvl, multicast, vecs) in enumerate(groups)]
    classes_used = classes.used(op)
    merges = group_merges(op, len(arch.levels), chosen, classes_used)
    # Rule S6: level sets that cannot hold an operand's smallest tile under the vector are left out.
    fits = class_chain_fits(op, arch, [(lvl, vecs) for lvl, _, vecs in chosen], classes_used, chains)
    if loose_fit is not None:
        fits = {name: [ok | loose_fit for ok in masks] for name, masks in fits.items()}
    level_pes = level_unrolling(len(arch.levels), [(lvl, vecs) for lvl, _, vecs in chosen], len(total))
    keep = np.ones(len(total), dtype=bool)
    if cons.min_utilization:
        keep = pes >= cons.min_utilization * arch.num_pes
        pes = pes[keep]
        merges = {k: v[keep] for k, v in merges.items()}
        fits = {name: [ok[keep] for ok in masks] for name, masks in fits.items()}
        total, level_pes = total[keep], level_pes[keep]
    energy = latency = pair_e = pair_l = np.full(len(keep), np.inf)
    if len(pes):
        serial_fills = serial_fill_levels(arch)
        pinned = PinnedCases(class_pinned_stall(op, arch, chains, serial_fills, loose_operand, classes.members, total,
                                                level_pes, merges),                          # rule B24
                             op, arch, chains, serial_fills, loose_operand, merges, level_pes,
                             np.ones(len(classes.members), dtype=bool))                      # rule B33
        pinned = RefillCases(pinned, op, arch, chains, merges, level_pes)                  # rule B64
        pairs = CombinationPairs(objective)                                                 # rule B25
        schedule = class_schedule(op, arch.compute.macs_per_cycle, classes.members, total)   # rule B32
        e, lat = spatial_bounds(op, arch, merges, pes, chains, fits, stall_terms(op, arch, pes, chains, schedule),
                                pinned, pairs)
        pe, pl = pairs.rows() if pairs.done else (e, lat)
        energy, latency, pair_e, pair_l = (np.full(len(keep), np.inf) for _ in range(4))
        energy[keep], latency[keep], pair_e[keep], pair_l[keep] = e, lat, pe, pl
    return ClassRowBounds(energy, latency, pair_e, pair_l)


def certified_lower_bound(op: Operator, arch: Accelerator, cons: Constraints,
                          chains: dict[str, list[list[int]]], objective: str, *, deadline: float | None = None,
                          clock: Callable[[], float] = time.perf_counter,
                          floor_past_limit: bool = True) -> tuple[float, float, float]:
    """(objective, energy, latency) lower bounds that hold for every mapping of ``op`` the constraints
    allow: any spatial unrolling (any dims per axis, padded or not), tiling (perfect or not), order and
    bypass choice of ``chains``.

    ``bounds.spatial_bounds`` depends on an unrolling only through its PEs and, per fan-out level and
    operand, the merge: the product of the bounds of the dims the operand does not use. Both are
    products over *classes* of dims (dims used by the same operands: P, Q and N of a convolution form
    one), and the bound is non-increasing in each merge and in the PEs. So a relaxation suffices: per
    fan-out level, axes alike in multicast and reduce form one group; a group takes any integer
    vector over classes whose product fits the group's PEs (reduced classes only where the axes
    reduce), and every class's product over all groups stays within its size. Every real unrolling
    maps to such a vector with the same merges and PEs, so the minimum over the vectors is a bound
    over every unrolling. Axes fixed by the constraints keep their unrolling.

    ``floor_past_limit`` False: raise TooManyUnrollings past BOUND_COMBINATIONS instead of returning the plain floor
    (``certificate.py`` then falls back to its relaxed bound and says so).
    ``deadline`` (on ``clock``): raise CertificateOutOfTime when the clock passes it between chunks of rows
    (``certificate.py`` then falls back to a cheaper bound).
    """
    classes = dim_classes(op)
    class_of = classes.class_of
    out_name = op.output.name
    # Groups: (level, multicast, vectors[n, classes]).
    groups: list[tuple[int, bool, np.ndarray]] = []
    for g in fanout_groups(arch, cons):
        if g.fixed:
            vec = np.ones((1, len(classes.keys)), dtype=np.int64)
            for d, b in cons.spatial[g.axes[0]].items():
                if d in class_of:
                    vec[0, class_of[d]] *= b
        else:
            values = [class_values(op, dims, out_name not in k, g.size) if out_name in k or g.reduce else [1]
                      for dims, k in zip(classes.members, classes.keys, strict=True)]
            vec = _vectors(values, g.size)
        groups.append((g.level, g.multicast, vec))
    # Every combination of the groups' vectors within the class sizes. Past BOUND_COMBINATIONS (a 128x128 array with
    # four classes of large dims reaches 10^8, tens of GB), the plain floor instead: every MAC done once, at most
    # every PE busy; a valid bound over every mapping, only looser (a search then proves less).
    try:
        picks, total = _combinations([vecs for _, _, vecs in groups], np.array(classes.budgets),
                                     max_rows=BOUND_COMBINATIONS)
    except TooManyUnrollings:
        if not floor_past_limit:
            raise
        energy_floor = op.macs * arch.compute.mac_energy_pj
        latency_floor = op.macs / arch.peak_macs_per_cycle
        floor = scalar(objective if objective != "pareto" else "edp", np.array([energy_floor]),
                       np.array([latency_floor]))
        return float(floor.min()), float(energy_floor), float(latency_floor)
    least = (math.inf, math.inf, math.inf)
    # Every row's bound depends on that row alone, so the minima over chunks of rows are the minima over all of
    # them (bit for bit); between chunks the clock is read against ``deadline``.
    for start in range(0, len(picks), CERTIFICATE_CHUNK):
        if deadline is not None and clock() > deadline:
            raise CertificateOutOfTime
        part = slice(start, start + CERTIFICATE_CHUNK)
        rows = class_vector_bounds(op, arch, cons, chains, objective, classes, groups, picks[part], total[part])
        best = scalar(objective if objective != "pareto" else "edp", rows.pair_energy, rows.pair_latency)
        least = (min(least[0], float(best.min())), min(least[1], float(rows.energy.min())),
                 min(least[2], float(rows.latency.min())))
    return least


def unrolling_of(arch: Accelerator, m: Mapping) -> dict[str, dict[str, int]]:
    """A mapping's fan-outs as the exact search fixes them (the constraints' form: every axis -> {dim: bound},
    an axis the mapping does not use empty)."""
    spatial: dict[str, dict[str, int]] = {name: {} for name in arch.fanout_axes()}
    for l in m.loops:
        if l.axis is not None and l.bound > 1:
            spatial[l.axis][l.dim] = spatial[l.axis].get(l.dim, 1) * l.bound
    return spatial
