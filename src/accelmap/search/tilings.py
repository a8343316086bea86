"""Enumerate the maximal tilings of an operator and rank them with the vectorized cost model.

For one spatial unrolling and one bypass choice, the temporal factors of every
dimension are dealt to the levels innermost first. At each level every
combination of divisors of what is left is tried, dimension by dimension, and
a combination is dropped as soon as its tile overflows the level (tile size
grows with every extent, so no larger factor can fit either). Of the rest,
only *maximal* tiles are kept: those where no dimension's factor can be
multiplied by one more prime and still fit (this level and every level
outside it, which holds the same tile at least once) (LOMA's greedy allocation for every
ordering of the prime factors at once). The outermost level takes what is left.

Maximal tiles are a heuristic restriction, not a proven one: a smaller tile can
win on latency (a shorter double-buffer prologue) or when a level's energy per
access is high. ``heuristic.py`` follows this with a local search that moves
single prime factors between levels, which reaches the non-maximal neighbours.

Two other packings (``Packing``) give seeds the plain one misses on hierarchies
of per-operand buffers (ZigZag's ascend_like: a weight-only register below an
input-only buffer below an output-only one). *Own dims only*: a level takes
factors only of the dims that index an operand it keeps; the others pass
outward to the first level whose tiles they grow. Plain packing pushes every
dim a level's tile does not grow with into the innermost such level (all of P
and Q into a one-weight register), which re-walks the other operands' data at
every step; the own-dims packing leaves each operand's tile as large as fits at
every level and the loops that only re-walk other data outside it, down to
operands kept whole in the large buffers (ZigZag's choice there). *Half a
double-buffer-when-fits level*: the tile is packed to half such a level's
capacity, so it stays double-buffered; a plain maximal tile just over half
makes it single-buffered and stalls the compute for each refill. Measured on
ZigZag's unrolling of ResNet-18 layer3.0.conv2 on ascend_like: best plain
maximal tiling 2.2e13 EDP, best own-dims one 9.9e12, ZigZag's own mapping 1.06e13.

Every tiling is then costed under a few per-level loop orders at once with
``cost.batch.evaluate_batch``; the best rows go on to the exact per-level order
choice of ``orders.py`` and the scalar model.

Dimensions that a fixed spatial unrolling does not divide are padded (the
spatial loop's last round is partial); the ranking runs on the operator padded
to whole rounds, the final costs on the real one.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.batch import evaluate_batch, tile_sizes
from accelmap.cost.model import evaluate
from accelmap.mapping.sampling import divisors, prime_factors
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC
from accelmap.search.objective import scalar
from accelmap.search.tiling import Keep, Spatial, Tiling, batch_form, spatial_at
from accelmap.workload.index_sets import tile_size
from accelmap.workload.operator import Operator

ROWS_PER_LEVEL = DEFAULT_HEURISTIC.rows_per_level


@dataclass(frozen=True)
class Ranked:
    """A tiling with an order, and its objective value."""
    value: float
    tiling: Tiling


@dataclass(frozen=True)
class Packing:
    """How ``maximal_tilings`` packs the levels; the module doc says why each exists."""
    own_dims_only: bool = False      # a level takes factors only of dims that index an operand it keeps
    half_when_fits: bool = False     # a level double-buffered when two tiles fit is packed to half its capacity


PLAIN = Packing()


def packings(op: Operator, arch: Accelerator, keep: Keep, rem: dict[str, int]) -> list[Packing]:
    """The packings that differ from the plain one for this bypass choice (plain first)."""
    own = any(rem[d] > 1 and not any(d in X.dims for X in op.operands if X.name in keep[c])
              for c in range(1, len(arch.levels)) for d in op.dim_names)
    half = any(lv.double_buffered_when_fits and keep[c] for c, lv in enumerate(arch.levels) if c > 0)
    return [Packing(o, h) for o in ([False, True] if own else [False]) for h in ([False, True] if half else [False])]


def _fits(op: Operator, arch: Accelerator, keep: frozenset[str], level: int,
          ext: dict[str, np.ndarray], half_when_fits: bool = False) -> np.ndarray:
    """Vectorized ``validate.tile_fits``; ``half_when_fits``: a level double-buffered when two tiles
    fit must hold two."""
    return _fits_levels(op, arch, [(keep, level)], ext, half_when_fits)


def _fits_levels(op: Operator, arch: Accelerator, levels: list[tuple[frozenset[str], int]],
                 ext: dict[str, np.ndarray], half_when_fits: bool = False) -> np.ndarray:
    """``_fits`` of several (bypass choice, level) pairs in one call: ``ext`` holds one block of rows per pair, in
    the order of ``levels``, and so does the result. Each operand's tile sizes are computed once over every block
    (the cost of a fit check is mostly per call, and ``maximal_tilings`` checks a tile against every level outside
    it at each step)."""
    n_all = len(next(iter(ext.values())))
    n = n_all // len(levels)
    sizes: dict[str, np.ndarray] = {}
    for X in op.operands:
        if not any(X.name in keep for keep, _ in levels):
            continue
        size, holes = tile_sizes(X, ext)
        if holes.any():
            # Axes with holes (stride beyond the window): exact set sizes for those rows.
            size = size.copy()
            for r in np.nonzero(holes)[0]:
                size[r] = tile_size(X, {d: int(v[r]) for d, v in ext.items()})
        sizes[X.name] = size
    out = np.ones(n_all, dtype=bool)
    for b, (keep, level) in enumerate(levels):
        lv = arch.levels[level]
        mult = 2 if lv.double_buffered or (half_when_fits and lv.double_buffered_when_fits) else 1
        by_cls: dict[str, np.ndarray] = {}
        total = np.zeros(n, dtype=np.int64)
        for X in op.operands:
            if X.name not in keep:
                continue
            bits = sizes[X.name][b * n:(b + 1) * n] * (X.bits * mult)
            by_cls[X.cls] = by_cls.get(X.cls, 0) + bits
            total = total + bits
        if lv.partitions:
            ok = np.ones(n, dtype=bool)
            for cls, bits in by_cls.items():
                ok &= bits <= lv.partition_bits(cls)
            out[b * n:(b + 1) * n] = ok
        elif lv.capacity_bits is not None:
            out[b * n:(b + 1) * n] = total <= lv.capacity_bits
    return out


def maximal_tilings(op: Operator, arch: Accelerator, keep: tuple[frozenset[str], ...], spatial: dict,
                    rem: dict[str, int], rng: np.random.Generator,
                    rows_per_level: int = ROWS_PER_LEVEL, packing: Packing = PLAIN) -> np.ndarray:
    """Factor arrays F[row, level, dim] (dims in ``op.dim_names`` order) of maximal tilings; see the module doc.

    ``op`` is the (padded) operator whose sizes are spatial x ``rem`` per dim. ``packing``: which dims a
    level may take and how full it may be packed (the module doc).
    """
    dims = op.dim_names
    nlev = len(arch.levels)
    D = len(dims)
    sp = spatial_at(spatial)
    # Spatial extent inside each level: the spatial loops at that level and below.
    sp_in = [{d: math.prod(sp.get(l, {}).get(d, 1) for l in range(c, nlev)) for d in dims} for c in range(nlev)]
    F = np.ones((1, nlev, D), dtype=np.int64)
    cum = np.ones((1, D), dtype=np.int64)            # temporal product of the levels already dealt

    # The same as an array (levels x dims), to stack the levels' tiles in one product.
    sp_arr = np.array([[sp_in[c][d] for d in dims] for c in range(nlev)], dtype=np.int64).reshape(nlev, D)

    def fits_up(cum_rows, c):
        # Tiles dealt so far must fit level c and every level outside it (each holds them at least once): one
        # fit check over the levels' tiles stacked.
        outside = range(c, -1, -1)
        stacked = np.ascontiguousarray((cum_rows[None, :, :] * sp_arr[c::-1, None, :]).reshape(-1, D).T)
        ext = {d: stacked[i] for i, d in enumerate(dims)}
        ok = _fits_levels(op, arch, [(keep[c2], c2) for c2 in outside], ext, packing.half_when_fits)
        return ok.reshape(len(outside), len(cum_rows)).all(axis=0)

    for c in range(nlev - 1, 0, -1):
        if not len(F):
            break
        if c == nlev - 1:
            # (Every later level starts from rows already checked against it and the levels outside it: each
            # row's tiles were checked against level c + 1 and every level outside it, with the same extents.)
            base = fits_up(cum, c)
            F, cum = F[base], cum[base]
        own = {d for X in op.operands if X.name in keep[c] for d in X.dims}
        # The dims this level takes factors of (and is maximal in).
        takes = [(i, d) for i, d in enumerate(dims) if not packing.own_dims_only or d in own]
        for i, d in takes:
            if rem[d] == 1 or not len(F):
                continue
            q = rem[d] // cum[:, i]
            # Every divisor's rows at once (grouped by divisor, as one loop per divisor would give them), and
            # one fit check for all of them: the check's cost is mostly per call, not per row.
            sel_rows, values = [], []
            for v in divisors(rem[d]):
                sel = np.nonzero(q % v == 0)[0]
                sel_rows.append(sel)
                values.append(np.full(len(sel), v, dtype=np.int64))
            pick, val = np.concatenate(sel_rows), np.concatenate(values)
            f2, c2 = F[pick], cum[pick]
            f2[:, c, i] = val
            c2[:, i] *= val
            ok = val == 1
            if not ok.all():
                ok[~ok] = fits_up(c2[~ok], c)
            F, cum = f2[ok], c2[ok]
        # Maximal: no dim can take one more prime factor at this level (the grown rows of every dim checked at once).
        grown_rows, grown_cum = [], []
        for i, d in takes:
            q = rem[d] // cum[:, i]
            grow = np.nonzero(q > 1)[0]
            if not len(grow):
                continue
            # q divides rem[d]: look its smallest prime up among rem[d]'s few distinct values.
            uniq, inv = np.unique(q[grow], return_inverse=True)
            p = np.array([prime_factors(int(x))[0] for x in uniq])[inv.reshape(-1)]
            c2 = cum[grow]
            c2[:, i] *= p
            grown_rows.append(grow)
            grown_cum.append(c2)
        maximal = np.ones(len(F), dtype=bool)
        if grown_rows:
            grow = np.concatenate(grown_rows)
            maximal[grow[fits_up(np.concatenate(grown_cum), c)]] = False
        F, cum = F[maximal], cum[maximal]
        if len(F) > rows_per_level:
            pick = np.sort(rng.choice(len(F), rows_per_level, replace=False))
            F, cum = F[pick], cum[pick]
    if not len(F):
        return F
    # The outermost level takes the rest; it must hold its own tile too.
    rest = np.array([rem[d] for d in dims], dtype=np.int64) // cum
    F[:, 0, :] = rest
    full = {d: np.full(len(F), rem[d] * sp_in[0][d], dtype=np.int64) for d in dims}
    ok = _fits(op, arch, keep[0], 0, full)
    return F[ok]


def seed_tilings(op: Operator, arch: Accelerator, keep: Keep, spatial: dict, rem: dict[str, int],
                 rng: np.random.Generator, rows_per_level: int = ROWS_PER_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The plain maximal tilings, and those of every other packing that differs for this bypass choice
    (``packings``) that are not plain ones, each distinct row once."""
    plain, *others = [maximal_tilings(op, arch, keep, spatial, rem, rng, rows_per_level, p)
                      for p in packings(op, arch, keep, rem)]
    if not others:
        return plain, plain[:0]
    rest = np.concatenate(others)
    if not len(rest):
        return plain, rest
    _, first = np.unique(rest.reshape(len(rest), -1), axis=0, return_index=True)
    rest = rest[np.sort(first)]
    known = {r.tobytes() for r in plain}
    return plain, rest[np.array([r.tobytes() not in known for r in rest], dtype=bool)]


def random_tilings(op: Operator, arch: Accelerator, keep, spatial: dict, rem: dict[str, int],
                   rng: np.random.Generator, n: int) -> np.ndarray:
    """Up to ``n`` random tilings that fit: every prime factor of every dim dealt to a uniformly
    drawn level (reaches the non-maximal tilings the enumeration leaves out)."""
    dims = op.dim_names
    nlev = len(arch.levels)
    F = np.ones((n, nlev, len(dims)), dtype=np.int64)
    rows = np.arange(n)
    for i, d in enumerate(dims):
        primes = prime_factors(rem[d])
        for p in primes:
            F[rows, rng.integers(0, nlev, n), i] *= p
    return F[valid_rows(op, arch, keep, spatial, F)]


def dim_orders(op: Operator) -> list[tuple[str, ...]]:
    """Per-level dimension orders (outermost first) to rank tilings under: one per operand
    priority, the loops over dims that do not index the first-priority operand innermost."""
    out: list[tuple[str, ...]] = []
    for prio in itertools.permutations(op.operands):
        inner_first = sorted(op.dim_names, key=lambda d: tuple(d in X.dims for X in prio))
        o = tuple(reversed(inner_first))
        if o not in out:
            out.append(o)
    return out


def cost_rows(op: Operator, arch: Accelerator, keep, spatial: dict, F: np.ndarray, objective: str,
              order: tuple[str, ...]) -> np.ndarray:
    """Objective of every tiling in F under one per-level order (vectorized model)."""
    return cost_rows_many(op, arch, keep, [spatial], [F], objective, order)


def cost_rows_many(op: Operator, arch: Accelerator, keep, spatials: list[Spatial], factor_groups: list[np.ndarray],
                   objective: str, order: tuple[str, ...]) -> np.ndarray:
    """``cost_rows`` of several unrollings' tilings (``factor_groups[g]`` under ``spatials[g]``) in one call,
    the values concatenated in that order (``tiling.batch_form``)."""
    structure, bounds = batch_form(op, len(arch.levels), spatials, order, factor_groups)
    res = evaluate_batch(op, arch, structure, keep, bounds, latency=objective != "energy")
    return res["energy"] if objective == "energy" else res["latency"] if objective == "latency" else res["edp"]


def rank_tilings(op: Operator, arch: Accelerator, keep: Keep, spatial: Spatial, groups: Sequence[np.ndarray],
                 objective: str, orders: list[tuple[str, ...]], top: int) -> tuple[list[list[Ranked]], int]:
    """The ``top`` best (tiling, order) rows of each group of tilings by the objective (all groups
    costed in the same calls, so each keeps its own best), and how many rows were costed."""
    sizes = [len(g) for g in groups]
    rows = np.concatenate(groups) if len(groups) > 1 else groups[0]
    found: list[list[Ranked]] = [[] for _ in groups]
    costed = 0
    for order in orders:
        vals = cost_rows(op, arch, keep, spatial, rows, objective, order) if len(rows) else np.zeros(0)
        costed += len(rows)
        lo = 0
        for g, n in enumerate(sizes):
            for r in np.argsort(vals[lo:lo + n], kind="stable")[:top]:
                found[g].append(Ranked(float(vals[lo + r]), Tiling(rows[lo + r].copy(), spatial, keep, order)))
            lo += n
    out = []
    for part in found:
        part.sort(key=lambda x: x.value)
        # The same tiling under several orders: keep its best, then the next tilings.
        seen = set()
        mine = []
        for f in part:
            key = f.tiling.factors.tobytes()
            if key not in seen:
                seen.add(key)
                mine.append(f)
        out.append(mine[:top])
    return out, costed


def valid_rows(op: Operator, arch: Accelerator, keep, spatial: dict, F: np.ndarray) -> np.ndarray:
    """Rows of F whose tile fits every level."""
    dims = op.dim_names
    nlev = len(arch.levels)
    sp = spatial_at(spatial)
    cum = np.ones((len(F), len(dims)), dtype=np.int64)
    ext: dict[str, list[np.ndarray]] = {d: [] for d in dims}
    for c in range(nlev - 1, -1, -1):
        cum = cum * F[:, c, :]
        sp_in = {d: math.prod(sp.get(l, {}).get(d, 1) for l in range(c, nlev)) for d in dims}
        for i, d in enumerate(dims):
            ext[d].append(cum[:, i] * sp_in[d])
    # Every level's tiles in one fit check (its cost is mostly per call).
    ok = _fits_levels(op, arch, [(keep[c], c) for c in range(nlev - 1, -1, -1)],
                      {d: np.concatenate(e) for d, e in ext.items()})
    return np.asarray(ok.reshape(nlev, len(F)).all(axis=0))


def neighbours(F: np.ndarray) -> np.ndarray:
    """Every tiling that moves one prime factor of one dim from one level to another."""
    nlev, D = F.shape
    out = []
    for a in range(nlev):
        for i in range(D):
            f = int(F[a, i])
            if f == 1:
                continue
            primes = sorted(set(prime_factors(f)))
            for p in primes:
                for b in range(nlev):
                    if b == a:
                        continue
                    g = F.copy()
                    g[a, i] //= p
                    g[b, i] *= p
                    out.append(g)
    return np.array(out, dtype=np.int64).reshape(-1, nlev, D)


def climb(op: Operator, arch: Accelerator, start: Ranked, objective: str, orders: list[tuple[str, ...]],
          keeps: Sequence[Keep] = (), max_steps: int = DEFAULT_HEURISTIC.climb_steps, memo: dict | None = None,
          deadline: float | None = None, clock: Callable[[], float] = time.perf_counter) -> tuple[Ranked, int]:
    """Steepest descent over single prime-factor moves, one-level bypass toggles and orders.

    Each step tries, cheapest first, and takes the best improvement of the first that has one:
    every neighbour costed at once under the current order; every bypass choice of ``keeps``
    that differs from the current one at one level (one row each: the scalar model); the
    current tiling and its neighbours under every other order. It stops at a tiling none of
    them improves. Returns the end point (its tiling carries the bypass choice it ended with) and
    the rows costed. ``memo`` (shared by the climbs of one search) keeps the toggles already costed:
    climbs meet the same tilings. Past ``deadline`` (on ``clock``) it returns where it is.
    The spatial unrolling stays the start's."""
    memo = {} if memo is None else memo
    cur = start
    spatial = start.tiling.spatial
    costed = 0
    for _ in range(max_steps):
        if deadline is not None and clock() > deadline:
            break
        t = cur.tiling
        assert t.order is not None, "a climb starts from a ranked tiling, which has an order"
        N = neighbours(t.factors)
        N = N[valid_rows(op, arch, t.keep, spatial, N)] if len(N) else N
        if len(N):
            vals = cost_rows(op, arch, t.keep, spatial, N, objective, t.order)
            costed += len(N)
            r = int(np.argmin(vals))
            if vals[r] < cur.value * (1 - 1e-12):
                cur = Ranked(float(vals[r]), replace(t, factors=N[r].copy()))
                continue
        best: Ranked | None = None    # a better bypass choice, else a better order
        for kp in keeps:
            if (sum(a != b for a, b in zip(kp, t.keep, strict=True)) != 1
                    or not valid_rows(op, arch, kp, spatial, t.factors[None])[0]):
                continue
            key = (t.factors.tobytes(), kp, t.order)
            if key not in memo:
                res = evaluate(op, arch, replace(t, keep=kp).mapping(op), check=False)
                memo[key] = scalar(objective, res.energy_total, res.latency)
                costed += 1
            v = memo[key]
            if v < cur.value * (1 - 1e-12) and (best is None or v < best.value):
                best = Ranked(v, replace(t, keep=kp))
        if best is not None:
            cur = best
            continue
        rows = np.concatenate([t.factors[None], N])
        for order in orders:
            if order == t.order:
                continue
            vals = cost_rows(op, arch, t.keep, spatial, rows, objective, order)
            costed += len(rows)
            r = int(np.argmin(vals))
            if vals[r] < cur.value * (1 - 1e-12) and (best is None or vals[r] < best.value):
                best = Ranked(float(vals[r]), Tiling(rows[r].copy(), spatial, t.keep, order))
        if best is None:
            break
        cur = best
    return cur, costed
