"""Rule B29 (docs/mapper.md): a double buffer hides a load only behind one window of compute.

The model (``cost/latency.py``, ``_burst``) runs the loads into a double-buffered level c in one queue and lets a
load hide only behind the compute of the window before it (the window: the shortest period, in steps, of the
streams that load into c), so a transition that brings a whole tile costs its load, not the run's average. With the
loop order of the levels between a node's free levels and c fixed, the transitions of those loops, the tile each
brings into c and the window are known, and the run's unfixed iterations are known when every fan-out is: so the
excess of those loads over a window's compute is a lower bound of the model's burst term, for every completion of
the node.

The model's burst at c is ``first + sum over the transitions outside the window of term``, with ``first`` the
compute of one window at the pace of compute (at least the bound's compute plus its stall) and, where output drains
pace the windows (``span`` >= ``first``, the drains' pace, which the model's latency also covers on its own:
latency >= N x span for N windows), ``term = (1 - p) max(first, t) + p max(span, t - (span - first))`` for a
transition whose loads take t and some p in [0, 1). So ``term - first >= max(p D, t - first - p D)`` with
``D = span - first``, and with ``x = p D``:

    latency >= pace + max(sum_j cnt_j (t_j - first - x)^+, N x)     for some x >= 0,

whose least value over x is, with ``u = first + x`` and the classes sorted by load, largest first,

    max_i N (pace + S_i) / (N + C_i)        (S_i, C_i: the sums of cnt_j t_j and cnt_j over the i largest;
                                             i = 0 gives the pace itself)

because ``pace + g(u) - N u`` falls strictly with u and each ``(pace + S_i) / (N + C_i)`` lies at or below its root.
Where no output level can drain as often as c changes windows, the drains never pace them (``span = first``) and the
bound is the model's own ``pace + sum_j cnt_j (t_j - first)^+`` (``undrained``). Both rise with the pace (``first``
is the pace over the N windows), so the bound's pace serves. Only loads known to be in the model's sum are counted: the
streams whose period is the window (a rarer stream queued before them may be prefetched a window early, the model's
``early``), each at least its setup and its tile delta over the child's write port (and over the parent's read port
when no fan-out lies between them, so that the parent sends each child instance its own elements).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from accelmap.cost.nest_rows import NestRows, fewest_bits
from accelmap.mapping.loopnest import Loop
from accelmap.search.last_step import stream_period
from accelmap.workload.index_sets import axis_overlap, tile_size


@dataclass(frozen=True)
class BurstClasses:
    """What rule B29 knows of level c's loads at a node: the window (steps, every stream's period known to be no
    shorter), the product of the ordered temporal loops above c, and per ordered loop outside the window whose
    transition brings a frequent stream a tile: (its transitions per iteration of the loops outside the ordered
    ones, the load's cycles)."""
    window: int
    inner: int
    classes: tuple[tuple[int, float], ...]


def burst_levels(ctx) -> tuple[int, ...]:
    """Levels whose loads overlap compute under every mapping (double buffers and clock-edge registers; not levels
    that are double-buffered only when two tiles fit, nor streamed single tiles) and receive an input the rules
    count (not loose)."""
    out = []
    for c, lv in enumerate(ctx.arch.levels):
        if c == 0 or not lv.refills_during_compute or lv.stream_single_tile:
            continue
        if any(c in ctx.chains[X.name][1:] and not X.is_output and X.name not in ctx.loose for X in ctx.op.operands):
            out.append(c)
    return tuple(out)


def burst_classes(ctx, above: tuple[Loop, ...], ext: tuple[int, ...], step: int, c: int) -> BurstClasses | None:
    """Rule B29's classes at level c: ``above``, the ordered loops above c (nest order, every loop from the outermost
    ordered level down to c; each loop of a deeper level runs inside every loop of a shallower one), ``ext``, c's tile
    extents (``op.dim_names`` order) and ``step``, the temporal iterations inside c's tile. Deltas and counts read
    only these (the strides of the loops above c are products of deeper loops of their dims, which c's extents
    hold). None where nothing is known (no window, or no frequent stream's load may exceed a window)."""
    op, arch = ctx.op, ctx.arch
    if not any(l.bound > 1 and not l.spatial for l in above):
        return None
    streams = [X for X in op.operands if c in ctx.chains[X.name][1:]]
    periods = {X.name: stream_period(above, X.dims, c) for X in streams}
    counted = [X for X in streams if not X.is_output and X.name not in ctx.loose]
    closed = [periods[X.name][0] for X in counted if periods[X.name][1]]
    if not closed:
        return None
    window = min(closed)
    # Every stream (the output's reloads and loose operands too, which may or may not load) has a period no
    # shorter than the window: the model's window is this one.
    if any(periods[X.name][0] < window for X in streams):
        return None
    frequent = [X for X in counted if periods[X.name] == (window, True)]
    # No load exceeds a whole tile of every frequent stream, and a window computes at least its steps' MAC schedule
    # (each step the temporal loops at and below c over the MACs per cycle): where the one fits in the other, no
    # transition costs more than its window and the rule has nothing to add.
    extents = dict(zip(op.dim_names, ext, strict=True))
    most = sum(_load_cycles(ctx, X, c, float(tile_size(X, extents))) for X in frequent)
    if most <= window * step / arch.compute.macs_per_cycle:
        return None
    slot_loads = _nest_rows_loads if arch.padding_generated or arch.levels[c].shared_axes else _slot_loads
    cnt, bounds, loads = slot_loads(ctx, above, extents, c, frequent)
    # the ordered loops above c, outermost first, are the slots; those outside the window: every loop above the
    # innermost run of product ``window``
    inner = math.prod(l.bound for l in above if not l.spatial)
    run = 1
    outside = len(bounds)
    for k in range(len(bounds) - 1, -1, -1):
        if run == window:
            break
        run *= bounds[k]
        outside = k
    classes = tuple((int(cnt[k]), float(loads[k])) for k in range(outside) if cnt[k] > 0 and loads[k] > 0)
    return BurstClasses(window, inner, classes) if classes else None


def _nest_rows_loads(ctx, above: tuple[Loop, ...], extents: dict[str, int], c: int, frequent: list
                     ) -> tuple[list[int], list[int], list[float]]:
    """``_slot_loads`` from a one-row ``NestRows`` of ``above`` over c's tile (c's tile as one loop per dim at c: the
    same extents and strides as the nest's own loops there), which also counts levels shared along an axis and
    generated padding."""
    inside = [(d, c, None, e) for d, e in extents.items() if e > 1]
    nest = NestRows(ctx.op, ctx.arch, [(l.dim, l.level, l.axis) for l in above] + [x[:3] for x in inside],
                    np.array([[l.bound for l in above] + [x[3] for x in inside]], dtype=np.int64)
                    .reshape(1, len(above) + len(inside)))
    slots = nest.above(c)
    loads = np.zeros(len(slots))
    for X in frequent:
        loads += _load_cycles(ctx, X, c, nest.deltas(X, c)[1][:, 0].astype(float))
    return ([int(k) for k in nest.classes(c)[0][:, 0]], [int(nest.B[0, j]) for j in slots],
            [float(t) for t in loads])


def _slot_loads(ctx, above: tuple[Loop, ...], extents: dict[str, int], c: int, frequent: list
                ) -> tuple[list[int], list[int], list[float]]:
    """Per temporal loop above c (all of ``above``'s, outermost first): its transitions (``NestRows.classes``), its
    bound, and the cycles of the frequent streams' loads it brings (``_load_cycles`` of ``NestRows.deltas``' elements
    entering), for the one nest ``above`` over c's tile ``extents``, counted with Python integers instead of a
    one-row ``NestRows`` (which costs more in NumPy's per-call overhead than the counts themselves). The same exact
    counts: a loop's transitions are (B - 1) x the temporal loops before it; its tile's shift along each dim is its
    own stride there (the product of every later loop of the dim, c's extent included) less the wrap-back
    ((B - 1) x stride) of every later temporal loop above c of that dim; what enters is the tile less its overlap
    with the shifted tile (``index_sets``, exact also for holed axes). (Where levels are shared along an axis or
    padding is generated, ``burst_classes`` keeps ``NestRows``.)"""
    op = ctx.op
    span = dict(extents)            # per dim, the product of the loops after the current one
    strides = [0] * len(above)
    for j in range(len(above) - 1, -1, -1):
        l = above[j]
        strides[j] = span[l.dim]
        span[l.dim] *= l.bound
    slots = [j for j, l in enumerate(above) if not l.spatial]
    cnt, bounds = [], []
    outer = 1
    for j in slots:
        b = above[j].bound
        cnt.append((b - 1) * outer)
        bounds.append(b)
        outer *= b
    axes = [[(tuple(cf for _, cf in ix.terms), tuple(d for d, _ in ix.terms)) for ix in X.indices] for X in frequent]
    tiles = [tile_size(X, extents) for X in frequent]
    loads = [0.0] * len(slots)
    back = dict.fromkeys(op.dim_names, 0)       # wrap-back of the later temporal loops above c, per dim
    for k in range(len(slots) - 1, -1, -1):
        l = above[slots[k]]
        stride = strides[slots[k]]
        shift = dict(back)
        shift[l.dim] += stride
        got = 0.0
        for X, X_axes, tile in zip(frequent, axes, tiles, strict=True):
            overlap = 1
            for coeffs, dims in X_axes:
                e = tuple(extents[d] for d in dims)
                overlap *= axis_overlap(coeffs, e, e, tuple(shift[d] for d in dims))
            got = got + _load_cycles(ctx, X, c, float(tile - overlap))
        loads[k] = got
        back[l.dim] -= (l.bound - 1) * stride
    return cnt, bounds, loads


def undrained(ctx, ordered: tuple[Loop, ...], b: BurstClasses, top: int) -> bool:
    """Do no output drains pace c's windows in the model? They pace them only from an output level with at least as
    many tiles as c has windows. A fixed output level below the free ones (deeper than ``top``) has at most (steps
    above it) / (its period) tiles, and both counts share the iterations outside the ordered loops: compared here
    without them."""
    op = ctx.op
    for d in ctx.chains[op.output.name][1:]:
        if d <= top:
            return False
        period, _ = stream_period(ordered, op.output.dims, d)
        above_d = math.prod(l.bound for l in ordered if not l.spatial and l.level < d)
        if above_d * b.window >= b.inner * period:
            return False
    return True


def _load_cycles(ctx, X, c: int, delta):
    """The fewest cycles the model's load of ``delta`` elements of X into c takes (numbers or arrays): its DMA setup
    (the parent's per-row latency may add to it) and the elements over the child's write port, or over the parent's
    read port when no fan-out lies between them (each child instance then gets its own elements from its parent)."""
    arch = ctx.arch
    chain = ctx.chains[X.name]
    p = chain[chain.index(c) - 1]
    P, C = arch.levels[p], arch.levels[c]
    w = fewest_bits(X, arch)
    per = 0.0 if C.write_bw_bits is None else w / C.write_bw_bits
    if P.read_bw_bits is not None and all(arch.levels[l].fanout is None for l in range(p, c)):
        per = max(per, w / P.read_bw_bits)
    if isinstance(delta, float):        # (the same operations on one number, without NumPy's per-call cost)
        return (float(C.transfer_setup_cycles) if delta > 0 else 0.0) + delta * per
    return np.where(delta > 0, float(C.transfer_setup_cycles), 0.0) + delta * per


def burst_cycles(found: list[tuple[BurstClasses, bool]], outside, pace):
    """Rule B29's bound of the model's inner latency: the largest over the levels of ``found`` (classes, and whether
    no drains pace the windows) of ``pace + sum_j cnt_j (t_j - first)^+`` where no drains pace them, else
    ``max_i N (pace + S_i) / (N + C_i)`` (module doc). ``outside``: iterations of the loops outside the ordered ones
    (the unfixed temporal iterations times the free levels' temporal loops); ``pace``: a lower bound of the pace of
    compute. Numbers or arrays of rows alike."""
    best = pace
    for b, calm in found:
        n_windows = outside * (b.inner / b.window)
        if calm:
            first = pace / n_windows
            got = pace
            for k, t in b.classes:
                got = got + outside * k * np.maximum(t - first, 0.0)
        else:
            s = c_sum = 0.0
            got = pace
            for k, t in sorted(b.classes, key=lambda kt: -kt[1]):
                s = s + outside * k * t
                c_sum = c_sum + outside * k
                got = np.maximum(got, n_windows * (pace + s) / (n_windows + c_sum))
        best = np.maximum(best, got)
    return best


def burst_node_classes(ctx, fixed: tuple[Loop, ...], level: int, free: frozenset[int] | set[int], unfixed: int
                       ) -> tuple[list[tuple[BurstClasses, bool]], int]:
    """Rule B29 at a node: the classes of every level of ``ctx.burst_levels`` below the free-order levels (cached
    per ordered nest; the levels from ``level`` down are fixed), and the iterations outside the ordered loops (``unfixed``, the unfixed temporal iterations,
    times the free levels' temporal loops). Nothing when ``unfixed`` is 0 (some fan-out open)."""
    if not unfixed or not ctx.burst_levels:
        return [], 0
    top = max(free, default=level - 1)
    # The classes need an ordered temporal loop above c (between the free levels and c): at the open-order bounds of
    # rules B3/B4 (every level above c free) there is none, and those are most of the calls (ResNet-18 layer2.0.conv1
    # on vta_like: 6,720 of 9,475, none of them raised by the rule). Checked before any key is built.
    if not any(top < l.level < c and l.bound > 1 and not l.spatial for c in ctx.burst_levels if c > top for l in fixed):
        return [], 0
    ordered = tuple(sorted((l for l in fixed if l.level > top), key=lambda l: l.level))
    found = []
    dims = ctx.op.dim_names
    for c in ctx.burst_levels:
        if c <= top:
            continue
        above = tuple(l for l in ordered if l.level < c)
        ext = dict.fromkeys(dims, 1)
        step = 1
        for l in ordered:
            if l.level >= c:
                ext[l.dim] *= l.bound
                step *= 1 if l.spatial else l.bound
        key = (c, above, tuple(min(ext[d], ctx.op.sizes[d]) for d in dims), step)
        got = ctx.burst_memo.get(key, False)
        if got is False:
            if len(ctx.burst_memo) > 200_000:
                ctx.burst_memo.clear()
            got = ctx.burst_memo[key] = burst_classes(ctx, *key[1:], c)
        if got is not None:
            found.append((got, undrained(ctx, ordered, got, top)))
    return found, unfixed * math.prod(l.bound for l in fixed if not l.spatial and l.level in free)
