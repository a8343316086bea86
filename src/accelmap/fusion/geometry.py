"""Geometry of a fused group: which rows and columns of every tensor each fused tile needs,
computes, fetches and holds.

A fused group is a chain of stages (multiply-accumulate operators, and pooling windows between
them) that run one fused tile at a time: the tile loop walks the last stage's output in tiles of
``tile_rows`` x ``tile_cols`` (rows outer, columns inner). Working back from that tile, every
earlier tensor is needed over a window of rows x columns; per tensor and per axis that window is
either recomputed whole at every tile or only its part not computed before is computed, the
overlap (halo) kept in an on-chip cache. DeFiNES (Mei et al., HPCA 2023) names the three useful
combinations: fully recompute, H-cached-V-recompute (columns cached, rows recomputed) and fully
cached. For the group's input the same choice says whether overlapping halos are fetched from
off-chip memory again or kept.

Everything here is a closed form over intervals, one per tile per axis; the two axes are
independent (the rows computed at a tile depend only on its tile row, the columns only on its tile
column), so the counts of a 2-D tile loop are products of per-axis sums.
``fusion.brute_force`` counts the same quantities by walking every element.

A group may end with a residual *join*: its last output plus a skip tensor of the same shape,
element by element (a ResNet block's add, a transformer FFN's residual). The skip is either one of
the group's own tensors kept on chip until the add at each tile reads it (``kept``: what a tile
needs of that tensor becomes the bounding rectangle of its window and the tile's output positions,
so the tensor's elements live until the add has read them; where the window holds them already it
adds nothing), or read again from off-chip memory at every tile (``re-read``: each element once,
staged in the store for one tile); a skip from outside the group (a projection shortcut) can only
be re-read.

A group may also span residual blocks: a join *inside* it (``Join.at``: the tensor it adds to, as that
tensor is computed) makes the add's result the tensor the next stage reads, and a later join may add
that result again (ResNet's block output read by the next block and by the next add). Such an add
applies at the positions of its tensor computed at each tile (recomputed positions again), so a kept
skip's window is widened to those positions, and a re-read skip is fetched at each of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from accelmap.errors import SpecError

Mode = Literal["fully-recompute", "H-cached-V-recompute", "fully-cached"]
# (rows cached, columns cached) of each mode; DeFiNES' third combination, rows cached and columns
# recomputed, needs a full-width line buffer for less saving than fully cached, so it is left out.
MODES: dict[str, tuple[bool, bool]] = {
    "fully-recompute": (False, False),
    "H-cached-V-recompute": (False, True),
    "fully-cached": (True, True),
}


# How a residual join gets its skip tensor: from the group's own tensor on chip, or off-chip again.
SKIP_POLICIES = ("kept", "re-read")


@dataclass(frozen=True)
class Join:
    """A residual add after a group's last stage: its output plus a skip tensor of the same shape."""

    name: str
    skip: int | None         # the group's tensor added (0: its input, j: stage j-1's output); None: from outside
    bits: int                # of a skip element
    # The tensor the add applies to, as it is computed (j: stage j-1's output, which then holds the sum);
    # None: the group's output. A join inside the group spans two residual blocks.
    at: int | None = None

    def target(self, n_stages: int) -> int:
        """The tensor index the add applies to in a group of ``n_stages`` stages."""
        return n_stages if self.at is None else self.at


@dataclass(frozen=True)
class AxisMap:
    """How output position ``o`` of a stage reads input positions ``stride*o - pad ... + span - 1``."""

    stride: int = 1
    span: int = 1
    pad: int = 0

    def needed(self, lo: int, hi: int, in_size: int) -> tuple[int, int]:
        """Input positions (clipped to the real tensor: padding is not stored) for outputs [lo, hi)."""
        if hi <= lo:
            return (0, 0)
        a = max(0, self.stride * lo - self.pad)
        b = min(in_size, self.stride * (hi - 1) - self.pad + self.span)
        return (a, max(a, b))


@dataclass(frozen=True)
class Stage:
    """One step of a fused chain: its output tensor (rows x cols x depth) from its input tensor."""

    name: str
    out_rows: int
    out_cols: int
    out_depth: int           # elements per (row, column) of the output
    in_rows: int
    in_cols: int
    in_depth: int
    rows: AxisMap
    cols: AxisMap
    macs_per_pixel: int      # multiply-accumulates per output (row, column); 0 for a pooling window
    in_bits: int
    out_bits: int
    # Independent heads of a batched product (attention's scores and context): its input and output depths are
    # ``heads`` equal slices, head h of the output reading only head h of the input. 1: not split.
    heads: int = 1

    def head_slice(self, heads: int) -> Stage:
        """The stage run on ``heads`` of its heads (a head tile)."""
        if self.heads <= 1 or self.heads % heads:
            raise SpecError(f"stage {self.name}: a head tile of {heads} does not divide its {self.heads} heads")
        f = self.heads // heads
        return replace(self, out_depth=self.out_depth // f, in_depth=self.in_depth // f,
                       macs_per_pixel=self.macs_per_pixel // f, heads=heads)

    @property
    def macs(self) -> int:
        return self.macs_per_pixel * self.out_rows * self.out_cols


def check_chain(stages: tuple[Stage, ...]) -> None:
    if not stages:
        raise SpecError("a fused group needs at least one stage")
    for a, b in zip(stages, stages[1:], strict=False):
        if (a.out_rows, a.out_cols, a.out_depth) != (b.in_rows, b.in_cols, b.in_depth):
            raise SpecError(f"fused chain: {a.name} gives {a.out_rows}x{a.out_cols}x{a.out_depth} but {b.name} "
                            f"reads {b.in_rows}x{b.in_cols}x{b.in_depth}")


@dataclass(frozen=True)
class AxisSchedule:
    """Per tile along one axis and per tensor (0: the group's input, j: stage j-1's output):
    the window needed and the part computed (or, for tensor 0, fetched)."""

    need: tuple[tuple[tuple[int, int], ...], ...]   # [tile][tensor] -> (lo, hi)
    comp: tuple[tuple[tuple[int, int], ...], ...]

    def computed_total(self, tensor: int) -> int:
        return sum(t[tensor][1] - t[tensor][0] for t in self.comp)

    def max_need(self, tensor: int) -> int:
        return max(t[tensor][1] - t[tensor][0] for t in self.need)

    def comp_sizes(self, tensor: int) -> np.ndarray:
        """Per tile, how many positions of the tensor it computes."""
        return np.array([t[tensor][1] - t[tensor][0] for t in self.comp], dtype=np.int64)

    def first_last(self, tensor: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Per position of the axis: the first and last tile whose window needs it (-1: none does).

        Windows only move forward, so the tiles needing a position are consecutive."""
        first = np.full(size, -1, dtype=np.int64)
        last = np.full(size, -1, dtype=np.int64)
        for t, windows in enumerate(self.need):
            lo, hi = windows[tensor]
            seg = first[lo:hi]
            seg[seg < 0] = t
            last[lo:hi] = t
        return first, last


def axis_schedule(maps: tuple[AxisMap, ...], in_sizes: tuple[int, ...], out_size: int, tile: int,
                  cached: tuple[bool, ...], kept_skips: dict[int, tuple[int, ...]] | None = None) -> AxisSchedule:
    """The windows of one axis. ``maps[j]``/``in_sizes[j]``: stage j's input axis; ``cached[j]``:
    tensor j (0 = the group's input) keeps its halo instead of recomputing (re-fetching) it.
    ``kept_skips[j]``: the tensors whose adds read tensor j, kept on chip, where each is computed at a
    tile (the group's output: the tile's output positions); tensor j's window is widened to hold them
    (both ends move forward with the tiles, so caching still holds)."""
    n = len(maps)
    kept_skips = kept_skips or {}
    high = [0] * n           # past the last position computed so far, per cached tensor
    needs, comps = [], []
    for t in range(math.ceil(out_size / tile)):
        lo, hi = t * tile, min(out_size, (t + 1) * tile)
        need: list[tuple[int, int]] = [(0, 0)] * (n + 1)
        comp: list[tuple[int, int]] = [(0, 0)] * (n + 1)
        need[n] = comp[n] = (lo, hi)
        for j in range(n - 1, -1, -1):
            a, b = maps[j].needed(comp[j + 1][0], comp[j + 1][1], in_sizes[j])
            for k in kept_skips.get(j, ()):
                if comp[k][1] <= comp[k][0]:
                    # The add computes nothing at this tile along this axis (so nothing at all), but the
                    # other axis cannot see that: the widened region would be no product of the two.
                    raise SpecError(f"a kept skip of tensor {j} for an add at a tile computing nothing of its "
                                    f"tensor {k} is not modeled")
                if b <= a:
                    # The tile needs nothing else of the tensor (along this axis, so at all): the kept
                    # region would be the add's positions alone, which the other axis cannot see.
                    raise SpecError(f"a kept skip at a tile that needs nothing else of its tensor {j} is not "
                                    "modeled (a window reading only padding, or everything computed before)")
                a, b = min(a, comp[k][0]), max(b, comp[k][1])
            need[j] = (a, b)
            if cached[j]:
                # Needed windows only move forward, so everything below the high-water mark that
                # is needed now was computed at an earlier tile and is still in the cache.
                c = max(a, high[j])
                comp[j] = (c, max(c, b))
                high[j] = max(high[j], b)
            else:
                comp[j] = (a, b)
        needs.append(tuple(need))
        comps.append(tuple(comp))
    return AxisSchedule(tuple(needs), tuple(comps))


@dataclass(frozen=True)
class FusedCounts:
    """What the tile loop of a group does, in elements (bits where named)."""

    tiles: int
    macs: tuple[int, ...]                  # per stage: MACs computed, recomputed halos included
    input_fetched: int                     # elements of the group's input read from off-chip memory
    output_written: int                    # elements of the group's output written off-chip (each once)
    buffer_bits: tuple[int, ...]           # per tensor 0..n: most bits of it on chip at one tile
    skip_fetched: int = 0                  # elements of a join's skip tensor read from off-chip memory
    skip_buffer_bits: int = 0              # the re-read skip's tile staged in the store
    head_tiles: int = 1                    # head tiles per tile (attention tiled over heads; 1: not)

    @property
    def buffer_total_bits(self) -> int:
        return sum(self.buffer_bits) + self.skip_buffer_bits


def all_joins(join: Join | None, skip_policy: str,
              inner_joins: tuple[tuple[Join, str], ...] = ()) -> tuple[tuple[Join, str], ...]:
    """The group's joins with their skip policies: those inside it, then the one ending it."""
    return tuple(inner_joins) + (((join, skip_policy),) if join is not None else ())


def schedules(stages: tuple[Stage, ...], tile_rows: int, tile_cols: int, policies: tuple[str, ...],
              join: Join | None = None, skip_policy: str = "re-read",
              inner_joins: tuple[tuple[Join, str], ...] = ()) -> tuple[AxisSchedule, AxisSchedule]:
    """Row and column schedules; ``policies[j]`` is the mode of tensor j (0 = the group's input).
    A ``join`` (ending the group) or one of ``inner_joins`` (each with its skip policy) whose skip is
    ``kept`` widens what the tiles need of the skip's tensor."""
    check_chain(stages)
    skip_at: dict[int, tuple[int, ...]] = {}
    n = len(stages)
    for jn, sp in all_joins(join, skip_policy, inner_joins):
        check_join(stages, jn, sp)
        if sp == "kept":
            assert jn.skip is not None
            skip_at[jn.skip] = skip_at.get(jn.skip, ()) + (jn.target(n),)
    if len(policies) != len(stages):
        raise SpecError(f"fused group of {len(stages)} stages needs {len(stages)} halo policies (its input and "
                        f"every intermediate), got {len(policies)}")
    for p in policies:
        if p not in MODES:
            raise SpecError(f"halo policy {p!r} unknown; choose one of {', '.join(MODES)}")
    last = stages[-1]
    if not (1 <= tile_rows <= last.out_rows and 1 <= tile_cols <= last.out_cols):
        raise SpecError(f"fused tile {tile_rows}x{tile_cols} must be within the output {last.out_rows}x"
                        f"{last.out_cols}")
    rows = axis_schedule(tuple(s.rows for s in stages), tuple(s.in_rows for s in stages), last.out_rows,
                         tile_rows, tuple(MODES[p][0] for p in policies), skip_at)
    cols = axis_schedule(tuple(s.cols for s in stages), tuple(s.in_cols for s in stages), last.out_cols,
                         tile_cols, tuple(MODES[p][1] for p in policies), skip_at)
    return rows, cols


def check_join(stages: tuple[Stage, ...], join: Join, skip_policy: str) -> None:
    """A join's skip tensor has the shape of the tensor it adds to (the group's output, or an
    intermediate for a join inside the group); only a tensor of the group before it can be kept."""
    if skip_policy not in SKIP_POLICIES:
        raise SpecError(f"skip policy {skip_policy!r} of join {join.name} unknown; choose one of "
                        f"{', '.join(SKIP_POLICIES)}")
    if join.skip is None:
        if skip_policy == "kept":
            raise SpecError(f"join {join.name}: its skip tensor comes from outside the group, so it cannot be kept")
        return
    n = len(stages)
    at = join.target(n)
    if not 1 <= at <= n:
        raise SpecError(f"join {join.name}: it adds to tensor {at}, not one of the group's tensors 1..{n} (the "
                        "stages' outputs)")
    if not 0 <= join.skip < at:
        raise SpecError(f"join {join.name}: skip tensor {join.skip} is not one of the group's tensors 0..{at - 1} "
                        "(its input and the intermediates before the add)")
    s = stages[join.skip]
    t = stages[at - 1]
    if (s.in_rows, s.in_cols, s.in_depth) != (t.out_rows, t.out_cols, t.out_depth):
        raise SpecError(f"join {join.name}: skip tensor {s.in_rows}x{s.in_cols}x{s.in_depth} differs from the "
                        f"tensor it adds to, {t.out_rows}x{t.out_cols}x{t.out_depth}")


def head_runs(stages: tuple[Stage, ...]) -> list[tuple[int, int]]:
    """The runs of consecutive stages split into the same heads (first, last stage), in order."""
    runs: list[tuple[int, int]] = []
    for j, s in enumerate(stages):
        if s.heads <= 1:
            continue
        if runs and runs[-1][1] == j - 1 and stages[j - 1].heads == s.heads:
            runs[-1] = (runs[-1][0], j)
        else:
            runs.append((j, j))
    return runs


def head_segment(stages: tuple[Stage, ...], head_tile: int | None,
                 joins: tuple[tuple[Join, str], ...] = ()) -> tuple[int, int] | None:
    """The stages a head tile of ``head_tile`` heads splits (first, last stage); None without a head tile.

    Attention tiled over heads: per tile of the fused loop, the stages before the run once, the run's stages
    once per head tile (the scores, softmax and context of ``head_tile`` heads), the stages after once. Only
    the tensors inside the run (the scores) are then held a head tile at a time; the run's input (all heads'
    queries, made by the stage before it or fetched) and its output (every head's context, read by the stage
    after it or written back) stay whole for the tile."""
    if head_tile is None:
        return None
    runs = head_runs(stages)
    if len(runs) != 1:
        raise SpecError(f"a head tile needs one run of consecutive stages split into heads (attention's scores and "
                        f"context); the group has {len(runs)}")
    a, b = runs[0]
    heads = stages[a].heads
    if not (1 <= head_tile <= heads and heads % head_tile == 0):
        raise SpecError(f"head tile {head_tile} must divide the {heads} heads of {stages[a].name}")
    if joins:
        raise SpecError("a head tile in a group with a residual join is not modeled")
    for s in stages[a:b + 1]:
        if (s.rows.span, s.rows.stride, s.cols.span, s.cols.stride) != (1, 1, 1, 1):
            raise SpecError(f"stage {s.name}: a head tile needs stages reading one row per row (no window)")
    return a, b


def fused_counts(stages: tuple[Stage, ...], tile_rows: int, tile_cols: int,
                 policies: tuple[str, ...], join: Join | None = None, skip_policy: str = "re-read",
                 inner_joins: tuple[tuple[Join, str], ...] = (), head_tile: int | None = None) -> FusedCounts:
    """The tile loop's counts; with ``join`` (and ``inner_joins``), each skip tensor ``kept`` on chip
    (the tensor's windows widened to the positions the add computes: more buffer, or more computed,
    where they were not in them) or ``re-read`` at each position the add computes, staged per tile.
    With ``head_tile`` (``head_segment``) the tensors inside the run of head-split stages hold one head
    tile's share of their window; nothing else changes (the heads are independent: the same positions are
    computed, fetched and written)."""
    segment = head_segment(stages, head_tile, all_joins(join, skip_policy, inner_joins))
    rows, cols = schedules(stages, tile_rows, tile_cols, policies, join, skip_policy, inner_joins)
    n = len(stages)
    macs = tuple(s.macs_per_pixel * rows.computed_total(j + 1) * cols.computed_total(j + 1)
                 for j, s in enumerate(stages))
    fetched = rows.computed_total(0) * cols.computed_total(0) * stages[0].in_depth
    last = stages[-1]
    depth = [stages[0].in_depth] + [s.out_depth for s in stages]
    bits = [stages[0].in_bits] + [s.out_bits for s in stages]
    heights = [stages[0].in_rows] + [s.out_rows for s in stages]
    widths = [stages[0].in_cols] + [s.out_cols for s in stages]
    buffers = []
    for j in range(n + 1):
        rows_cached, cols_cached = MODES[policies[j]] if j < n else (False, False)
        live = live_elements(rows, cols, j, heights[j], widths[j], rows_cached, cols_cached)
        d = depth[j]
        if segment is not None and segment[0] < j <= segment[1]:
            assert head_tile is not None
            d = d // stages[j - 1].heads * head_tile       # a head tile of the scores at a time
        buffers.append(live * d * bits[j])
    skip_fetched = 0
    staged = np.zeros((len(rows.comp), len(cols.comp)), dtype=np.int64)    # re-read skip bits per tile
    for jn, sp in all_joins(join, skip_policy, inner_joins):
        if sp != "kept":
            k = jn.target(n)
            skip_fetched += rows.computed_total(k) * cols.computed_total(k) * depth[k]
            staged += np.outer(rows.comp_sizes(k), cols.comp_sizes(k)) * depth[k] * jn.bits
    skip_buffer = int(staged.max())
    if segment is not None:
        for j in range(segment[0] + 1, segment[1] + 1):
            for sched, cached in ((rows, MODES[policies[j]][0]), (cols, MODES[policies[j]][1])):
                if cached and any(u[j][1] > v[j][0] for u, v in zip(sched.need, sched.need[1:], strict=False)):
                    # A cached halo of the scores is kept from one tile to the next for every head at once.
                    raise SpecError(f"a head tile with a cached halo of {stages[j - 1].name}'s output (a row window "
                                    "after the head-split stages) is not modeled")
    head_tiles = 1 if segment is None or head_tile is None else stages[segment[0]].heads // head_tile
    return FusedCounts(len(rows.need) * len(cols.need), macs, fetched,
                       last.out_rows * last.out_cols * last.out_depth, tuple(buffers), skip_fetched, skip_buffer,
                       head_tiles)


def live_elements(rows: AxisSchedule, cols: AxisSchedule, tensor: int, height: int, width: int,
                  rows_cached: bool, cols_cached: bool) -> int:
    """Most (row, column) positions of a tensor on chip at one tile (tiles rows outer, columns inner).

    A position is on chip from the tile that computes it to the last tile that needs it. Recomputed
    along an axis, it lives only in the tiles whose window holds it; cached along both, it is
    computed at the first tile needing it (first tile row needing its row, first tile column needing
    its column) and kept to the last, in the tile loop's order. So at tile (y, x), with Y, L the first
    and last tile rows needing a row and X, Z the same for a column, the positions kept are: rows with
    Y < y < L over every needed column, rows with Y < y = L over the columns with Z >= x (not yet done
    in this tile row), rows with Y = y < L over the columns with X <= x (done in this tile row), and
    rows with Y = y = L over the columns of the window. The line buffer of a cached row is thus exactly
    the part of the full width not in the window, which is what an over-the-width count added to the
    window overstated.
    """
    if not rows_cached:
        # Rows recomputed: nothing outlives its tile row, and within it a cached column is kept from
        # the first to the last tile needing it, i.e. while it is in the window (windows move forward).
        return rows.max_need(tensor) * cols.max_need(tensor)
    if not cols_cached:
        raise SpecError("rows cached with columns recomputed is not a fused halo mode")
    y0, y1 = rows.first_last(tensor, height)
    x0, x1 = cols.first_last(tensor, width)
    ty, tx = np.arange(len(rows.need)), np.arange(len(cols.need))
    needed_r, needed_c = y0 >= 0, x0 >= 0
    r0, r1 = y0[needed_r][None, :], y1[needed_r][None, :]
    yy = ty[:, None]
    spans = ((r0 < yy) & (r1 > yy)).sum(axis=1)          # carried through this tile row
    ends = ((r0 < yy) & (r1 == yy)).sum(axis=1)          # carried into it, last needed in it
    starts = ((r0 == yy) & (r1 > yy)).sum(axis=1)        # first needed in it, carried on
    only = ((r0 == yy) & (r1 == yy)).sum(axis=1)         # needed in it alone
    c0, c1 = x0[needed_c][None, :], x1[needed_c][None, :]
    xx = tx[:, None]
    not_done = (c1 >= xx).sum(axis=1)
    done = (c0 <= xx).sum(axis=1)
    window = ((c0 <= xx) & (c1 >= xx)).sum(axis=1)
    live = (spans[:, None] * int(needed_c.sum()) + ends[:, None] * not_done[None, :]
            + starts[:, None] * done[None, :] + only[:, None] * window[None, :])
    return int(live.max())

