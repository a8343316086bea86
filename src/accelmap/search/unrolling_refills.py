"""Rule B64 of docs/mapper.md: under every unrolling, an open single-buffered level's least refill stalls compute.

Rules S1 and S7 (``bounds.spatial_bounds``, ``unrolling_stall``) count every operand's footprint once into each level
that keeps it; the certificate (rule S2) is their least over the unrolling classes. But a small single-buffered level
(eyeriss_like's register files of 12 input, 224 weight and 24 partial-sum words) refetches some operand many times in
every tiling, and compute waits for each refill. Rule B53 (``ruby_open_refills``) bounds that stall at a node where
the level c is open, over every tile shape (any integer extents, so partial and padded tiles included) and every case
of the innermost temporal loop above c. Its counts (the elements entering c per case and shape) depend on neither the
unrolling nor the node; what does is

* the merges between c's parent p and c (``level_stall`` spreads an operand's parent-side elements over them) and,
  for the output, the reduction lineages above p: per row, as ``spatial.group_merges`` gives them;
* whether the case with no temporal loop above c is possible: only where the fan-outs above c unroll every dim d at
  least ``ceil(N_d / E_d)`` (B53's condition), so their product, the row's PEs above c, is at least
  ``prod_d ceil(N_d / E_d)``, at least a cell's product at its largest extents. Where the row's PEs above c are below
  every cell's product, that case is impossible for every shape, and the stall is the least over the cells' dim cases
  (B53's counts); elsewhere the case is possible and counts footprints.

``level_stall`` is non-decreasing in every count, so its least over the points (one per cell and dim case, counts per
operand c receives) is its least over the points no other point is at most in every count (``least_points``), and it
is evaluated once per distinct row of merges (``rows_of_merges``). Per combination of level sets (one per operand, as
rule S3 takes them) the term is the largest over the combination's single-buffered levels c of c's least stall (each
alone bounds the model's single-buffer stall, as B53 at the root); latency is at least the MAC schedule plus it, taken
with rule B24/B33's cases (``pinned_cases``) as the larger of the two stalls in each case.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from accelmap.search.bounds import BoundContext
from accelmap.search.open_level_refills import OpenShapes, level_stall, refilled_operands
from accelmap.search.pinned_cases import PinnedCases
from accelmap.search.ruby_open_refills import RubyCells, box_tiles, ruby_dim_cases, ruby_level_shapes
from accelmap.workload.operator import Operand

# Rows x points evaluated in one NumPy call (memory of the broadcast stall matrix).
STALL_BLOCK = 1 << 21


@dataclass(frozen=True)
class RefillPoints:
    """Rule B53's counts at an open level c over every cell and dim case, reduced to the least ones."""
    kept: tuple[Operand, ...]           # operands c receives from a parent
    counts: np.ndarray                  # [point, kept operand]: elements entering c
    unforced: float                     # least over cells of prod_d ceil(N_d / largest E_d): PEs above c the case
                                        # with no temporal loop above c needs at least


_POINTS: dict[tuple, RefillPoints | None] = {}
_CONTEXT_POINTS: dict[tuple[BoundContext, int], RefillPoints | None] = {}


def refill_points(ctx: BoundContext, c: int) -> RefillPoints | None:
    """``RefillPoints`` of level c under ``ctx``'s bypass choice, cached by what B53's cells and counts depend on (the
    operator, accelerator, c, what c keeps and the operands it receives from a parent; not their parents), and per
    context (hashing an operator and an accelerator costs more than a bound of one row)."""
    got = _CONTEXT_POINTS.get((ctx, c), False)
    if got is not False:
        return got          # type: ignore[return-value]
    if len(_POINTS) > 256:
        _POINTS.clear()
    key = (ctx.op, ctx.arch, c, ctx.keep[c], tuple(X.name for X in refilled_operands(ctx, c)))
    if key not in _POINTS:
        _POINTS[key] = _refill_points(ctx, c)
    if len(_CONTEXT_POINTS) > 2048:
        _CONTEXT_POINTS.clear()
    _CONTEXT_POINTS[ctx, c] = _POINTS[key]
    return _POINTS[key]


def _refill_points(ctx: BoundContext, c: int) -> RefillPoints | None:
    cells = ruby_level_shapes(ctx, c)
    if cells is None:
        return None
    names = [X.name for X in cells.kept]
    parts = []
    for d, rows, counts in ruby_dim_cases(ctx, c, cells):
        n = int(rows.sum())
        for case in window_cases(ctx, cells, d, counts) or [counts]:       # rule B65, else rule B53's counts
            parts.append(np.stack([np.asarray(case[k], dtype=np.float64)[rows] if np.ndim(case[k])
                                   else np.full(n, float(case[k])) for k in names], axis=1))
    points = least_points(np.concatenate(parts)) if parts else np.empty((0, len(names)))
    footprints = np.array([float(ctx.footprint[k]) for k in names])
    if not len(points) or (points <= footprints).all(axis=1).any():
        return None     # some case counts footprints only: the stall is then rule S7's (left out: a weaker bound)
    unforced = float(np.prod(cells.left_upper.astype(np.float64), axis=1).min())
    return RefillPoints(cells.kept, points, unforced)


# Steps of rule B65's share mu of the MACs whose box moved a partner of the window (the split [0, 1] is covered by
# intervals; more steps: a tighter least, more points).
WINDOW_STEPS = 8


def window_cases(ctx: BoundContext, cells: RubyCells, d: str, counts: dict[str, Any]) -> list[dict[str, Any]]:
    """Rule B65 in the case where the innermost temporal loop above c runs over d: for each operand X that c receives
    and that reads d only inside a sliding-window index (``s x a + t x d``), with operands Y that c receives plain in
    every partner a of d there, the counts of B53's case raised so that every mapping in the case is at least one of
    them: X at least ``(1 - mu_hi) x`` its count along d (``box_tiles(..., along=d)``), each Y at least ``mu_lo x`` its
    box count, for ``[mu_lo, mu_hi]`` the steps of [0, 1]. Empty where no operand is such an X."""
    out: list[dict[str, Any]] = []
    kept = {Y.name: Y for Y in cells.kept}
    for X in cells.kept:
        index = next((ix for ix in X.indices if d in dict(ix.terms)), None)
        if index is None or len(index.terms) < 2 or d in ctx.plain[X.name]:
            continue
        along = box_tiles(ctx, X, cells.upper, along=d)
        partners = {a for a, _ in index.terms if a != d}
        counted = {name: box_tiles(ctx, Y, cells.upper) for name, Y in kept.items()
                   if name != X.name and partners <= ctx.plain[name]}
        movers = {name: got for name, got in counted.items() if got is not None}
        if along is None or not movers:
            continue
        for k in range(WINDOW_STEPS):
            lo, hi = k / WINDOW_STEPS, (k + 1) / WINDOW_STEPS
            case = dict(counts)
            case[X.name] = np.maximum(counts[X.name], (1 - hi) * along)
            for name, got in movers.items():
                case[name] = np.maximum(counts[name], lo * got)
            out.append(case)
    return out


def least_points(points: np.ndarray, block: int = 1024) -> np.ndarray:
    """The rows of ``points`` that no other row is at most in every column (duplicates once): the least of a function
    non-decreasing in every column over ``points`` is its least over these. Each block of rows is checked against the
    rows kept from the blocks before and against itself."""
    pts = points[np.lexsort(points.T[::-1])]
    if len(pts):
        pts = pts[np.concatenate([[True], (np.diff(pts, axis=0) != 0).any(axis=1)])]
        # By the sum of the columns over their largest: a row at most another in every column, and different, has a
        # smaller sum and comes first (and the rows of small sums, checked first, rule out most of the others).
        pts = pts[np.argsort((pts / np.maximum(pts.max(axis=0), 1.0)).sum(axis=1), kind="stable")]
    front = np.empty((0, pts.shape[1]))
    for start in range(0, len(pts), block):
        part = pts[start:start + block]
        if len(front):
            part = part[~np.any(np.all(front[None, :, :] <= part[:, None, :], axis=2), axis=1)]
        le = np.asarray(np.all(part[None, :, :] <= part[:, None, :], axis=2))
        np.fill_diagonal(le, False)
        front = np.concatenate([front, part[~np.any(le, axis=1)]])
    return front


def rows_of_merges(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(one row index per class of equal rows of ``key``, each row's class)."""
    key = key[:, (key != key[:1]).any(axis=0)].astype(np.int64)     # (equal columns tell no rows apart)
    if not key.shape[1]:
        return np.zeros(1, dtype=np.int64), np.zeros(len(key), dtype=np.int64)
    low = key.min(axis=0)
    spans = key.max(axis=0) - low + 1
    if float(np.prod(spans.astype(np.float64))) < 2.0 ** 62:
        # one code per row in mixed radix over the columns' ranges: a single sort
        radix = np.concatenate([[1], np.cumprod(spans[:-1])])
        _, inverse = np.unique((key - low) @ radix, return_inverse=True)
        inverse, n = inverse.reshape(-1), int(inverse.max()) + 1
    else:
        _, inverse = np.unique(key, axis=0, return_inverse=True)     # (rows sorted field by field: slower)
        inverse, n = inverse.reshape(-1), int(inverse.max()) + 1
    first = np.zeros(n, dtype=np.int64)
    first[inverse[::-1]] = np.arange(len(inverse))[::-1]
    return first, inverse


def least_level_stall(ctx: BoundContext, c: int, merges: dict[str, np.ndarray], above: np.ndarray,
                      memo: dict | None = None) -> np.ndarray:
    """Per row, the least of rule B53's stall at single-buffered level c over every tile shape and case possible for
    the row: ``merges`` per operand [row, level] (``spatial.group_merges``, integers), ``above`` [row] the PEs of the
    fan-outs above c. Zero where c has no shape to bound. ``memo``: the rows' classes per (c, operands c receives),
    for callers that ask for several bypass choices over the same rows."""
    rows = len(above)
    got = refill_points(ctx, c) if rows else None
    if got is None or not len(got.counts):
        return np.zeros(rows)
    names = [X.name for X in got.kept]
    memo = {} if memo is None else memo
    if (c, tuple(names)) not in memo:
        cols = [merges[X.name][:, :c] for X in ctx.op.operands if X.name in names]
        memo[c, tuple(names)] = rows_of_merges(np.concatenate(cols + [above[:, None]], axis=1))
    first, inverse = memo[c, tuple(names)]
    # ``level_stall`` with the row's merges as column arrays (one definition of the stall: B27's and B53's)
    row_ctx = copy.copy(ctx)
    row_ctx.merge_cap = {name: [M[first, l][:, None] for l in range(M.shape[1])] for name, M in merges.items()}
    least = np.full(len(first), np.inf)
    step = max(1, STALL_BLOCK // len(first))
    for start in range(0, len(got.counts), step):
        part = got.counts[start:start + step]
        shapes = OpenShapes(part, {}, np.ones(len(part)), got.kept)    # (level_stall reads rows, kept)
        stall = level_stall(row_ctx, c, shapes, {k: part[:, i] for i, k in enumerate(names)})
        least = np.minimum(least, np.min(np.broadcast_to(stall, (len(first), len(part))), axis=1))
    footprint = OpenShapes(np.zeros((1, 1)), {}, np.ones(1), got.kept)
    none = level_stall(row_ctx, c, footprint, {k: float(ctx.footprint[k]) for k in names})
    none = np.broadcast_to(none, (len(first), 1))[:, 0]
    least = np.where(above[first] >= got.unforced, np.minimum(least, none), least)
    return least[inverse]


_CONTEXTS: dict[tuple, BoundContext] = {}


def root_context(op, arch, keep: tuple[frozenset[str], ...]) -> BoundContext:
    """A bound context of the bypass choice ``keep`` with no fan-out fixed, cached (rule B6 asks for one bypass
    choice per unrolling, hundreds of times per search; B64 reads only the context's chains, footprints and merges,
    which its rows replace)."""
    key = (op, arch, keep)
    got = _CONTEXTS.get(key)
    if got is None:
        if len(_CONTEXTS) > 512:
            _CONTEXTS.clear()
        got = _CONTEXTS[key] = BoundContext(op, arch, keep)
    return got


class RefillCases(PinnedCases):
    """Rule B24/B33's cases (``pinned_cases``) with rule B64's stall: each case's stall is the larger of its own and
    the combination's least refill stall of its single-buffered levels. ``merges`` per operand [row, level],
    ``level_pes`` [row, level] (the unrolling at each level's fan-out)."""

    def __init__(self, pinned: PinnedCases, op, arch, chains: dict[str, list[list[int]]],
                 merges: dict[str, np.ndarray], level_pes: np.ndarray):
        self.__dict__.update(pinned.__dict__)
        self.refill_op, self.refill_arch, self.refill_chains = op, arch, chains
        self.refill_merges = merges
        self.refill_above = np.cumprod(np.concatenate([np.ones((len(level_pes), 1)), level_pes], axis=1), axis=1)
        self.refill_memo: dict[tuple[int, ...], np.ndarray] = {}
        self.refill_rows: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def refill_stall(self, pick: tuple[int, ...]) -> np.ndarray:
        """Per row, the largest over the single-buffered levels of operand k's level set ``chains[k][pick[k]]`` of
        the level's least refill stall (``least_level_stall``)."""
        got = self.refill_memo.get(pick)
        if got is None:
            op, arch = self.refill_op, self.refill_arch
            chosen = {X.name: self.refill_chains[X.name][j] for X, j in zip(op.operands, pick, strict=True)}
            keep = tuple(frozenset(n for n, chain in chosen.items() if lv in chain) for lv in range(len(arch.levels)))
            ctx = root_context(op, arch, keep)
            got = np.zeros(len(self.refill_above))
            for c in sorted(ctx.serial_fill):
                if c > 0:
                    got = np.maximum(got, least_level_stall(ctx, c, self.refill_merges, self.refill_above[:, c],
                                                               self.refill_rows))
            self.refill_memo[pick] = got
        return got

    def cases(self, pick: tuple[int, ...]) -> list[tuple[np.ndarray | None, np.ndarray]]:
        refill = self.refill_stall(pick)
        return [(extra, np.maximum(stall, refill)) for extra, stall in super().cases(pick)]

    def ranking_cases(self, pick: tuple[int, ...]) -> list[tuple[np.ndarray | None, np.ndarray]] | None:
        # B64 raises the padded and the dividing unrollings unevenly: ranked with it, E1's first unrolling on
        # eyeriss_like's layer3.0.downsample was a worse one that took the whole limit (best found x1.05 at 10 CPU s).
        return super().cases(pick)
