"""Latency of a mapping from its access counts.

The run is modeled as the tile program the simulator executes (``accelmap.sim``):
decoupled load, compute and store units per level, double buffering where the
level has it. Terms, all in cycles:

* compute: the static MAC schedule (product of temporal bounds over MACs per
  cycle; a partial last tile still occupies its slots), or the compute side's
  streaming traffic at a level over its bandwidth if that is longer, plus the
  compute-pipeline overheads of seed 003's Eq. 4.1 (row setup and per-result
  overhead, ``compute.pipeline``);
* per level and operand, load and store time: bits per instance the mapping
  occupies over the bandwidth of the slower side, plus ``transfer_setup_cycles``
  per tile transfer (DMA call) — seed 003 found these per-call overheads and the
  *sum* (not max) of weight and input loads to dominate its latency error;
* a single-buffered level serializes with compute: at every tile change (one
  transition class per temporal loop above it) the exact deltas of the levels
  below that loop move, timed as the DMA units run them (``_transition_time``);
  a double-buffered level overlaps them, except for its first load (prologue)
  and last drain (epilogue), one step of compute hides at most one transition's
  loads (``_burst_bound``), and an output half must be computed, drained and
  refilled before its next use (two-half cycle);
* every unit and memory port must also fit its own total work.

latency = max(max(compute + stall, busiest double-buffered unit, bursts, two-half cycle)
              + prologue + epilogue, busiest port).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from itertools import pairwise

from accelmap.arch.accelerator import Accelerator, Level
from accelmap.mapping.loopnest import Mapping, loop_strides
from accelmap.workload.index_sets import axis_overlap, tile_size
from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class LatencyTerms:
    compute_cycles: int             # the static MAC schedule; pipeline overheads are separate
    transfer_cycles: dict[str, float]
    stall_cycles: float
    latency: float
    pipeline_cycles: float = 0.0
    setup_cycles: float = 0.0
    parts: tuple[tuple[str, float], ...] = ()   # what the latency is made of; sums to it


def used_instances(m: Mapping, level: int) -> int:
    """Instances of a level that a mapping occupies: the product of the spatial loops above it."""
    return math.prod(l.bound for l in m.loops if l.spatial and l.level < level)


def pipeline_overhead(op: Operator, arch: Accelerator, m: Mapping) -> float:
    """Total compute-pipeline cycles: rows x row setup + result sets x result overhead (Eq. 4.1)."""
    pipe = arch.compute.pipeline
    if pipe is None:
        return 0.0
    out_dims = op.output.dims
    suffix = []
    for l in reversed([l for l in m.loops if not l.spatial]):
        if l.dim in out_dims:
            break
        suffix.append(l)
    total = m.temporal_product()
    results = total // math.prod(l.bound for l in suffix)
    rows = total // math.prod(l.bound for l in suffix if l.dim in pipe.streamed_dims)
    return float(rows * pipe.row_setup_cycles + results * pipe.result_overhead_cycles)


def tile_transfers(op: Operator, m: Mapping, dims: frozenset[str], level: int) -> int:
    """Tiles of an operand (indexed by ``dims``) that ``level`` receives: one at the start, and one at
    every advance of a temporal loop above it that moves the operand (its own dim, or an inner
    loop over one of its dims that resets)."""
    above = [l for l in m.loops if not l.spatial and l.level < level and l.bound > 1]
    n, outer = 1, 1
    for k, l in enumerate(above):
        moves = l.dim in dims or any(x.dim in dims for x in above[k + 1:])
        if moves:
            n += (l.bound - 1) * outer
        outer *= l.bound
    return n


def _extents(op: Operator, m: Mapping, c: int) -> dict[str, int]:
    """Per dim, the span of one tile at level ``c`` (first instance)."""
    return {d: min(op.sizes[d], math.prod(l.bound for l in m.loops if l.dim == d and l.level >= c))
            for d in op.dim_names}


def _transition_classes(op: Operator, m: Mapping, c: int) -> dict[int, tuple[int, dict[str, int]]]:
    """Loop index j -> (transitions, shift): the tiles of level ``c`` change when a temporal loop
    above it advances; when loop j is the outermost one that advances (there are (bound-1) x
    outer such steps), the tile moves by j's stride along its dim and every inner loop above
    ``c`` resets."""
    above = [i for i, l in enumerate(m.loops) if not l.spatial and l.level < c]
    strides = {}
    for d in op.dim_names:
        s_ = 1
        for i in reversed([i for i, l in enumerate(m.loops) if l.dim == d]):
            strides[i] = s_
            s_ *= m.loops[i].bound
    out: dict[int, tuple[int, dict[str, int]]] = {}
    outer = 1
    for k, j in enumerate(above):
        lj = m.loops[j]
        if lj.bound > 1:
            shift = {d: 0 for d in op.dim_names}
            shift[lj.dim] += strides[j]
            for i in above[k + 1:]:
                shift[m.loops[i].dim] -= (m.loops[i].bound - 1) * strides[i]
            out[j] = ((lj.bound - 1) * outer, shift)
        outer *= lj.bound
    return out


def _class_deltas(X, ext: dict[str, int], classes: dict[int, tuple[int, dict[str, int]]]) -> tuple[int, dict[int, int]]:
    """(whole tile, loop index -> elements that enter at a transition of that class)."""
    axes = [(tuple(cf for _, cf in ix.terms), tuple(d for d, _ in ix.terms)) for ix in X.indices]
    full = tile_size(X, ext)
    deltas = {}
    for j, (_, shift) in classes.items():
        ov = 1
        for coeffs, ds in axes:
            e = tuple(ext[d] for d in ds)
            ov *= axis_overlap(coeffs, e, e, tuple(shift[d] for d in ds))
        deltas[j] = full - ov
    return full, deltas


def _edge_situations(op: Operator, m: Mapping, c: int) -> list[tuple]:
    """Transitions of level c's tiles, split by edge tiles: (transitions, old extents, new
    extents, shift). Per loop j above c (``_transition_classes``), and per state of the
    imperfect dims whose only loop above c is the outermost one of that dim, g: g sits at its
    last position (the edge tile, extent size - (bound-1) x stride) in 1/bound of the
    transitions of loops inside it, lands there in 1/(bound-1) of its own, and leaves it for its
    first position (full) whenever a loop outside it advances. Perfect mappings: one situation per loop."""
    classes = _transition_classes(op, m, c)
    ext = _extents(op, m, c)
    strides = loop_strides(m)
    above = [i for i, l in enumerate(m.loops) if not l.spatial and l.level < c]
    edges = {}                               # loop index -> (dim, edge extent)
    for d in op.dim_names:
        mine = [i for i, l in enumerate(m.loops) if l.dim == d]
        if not mine or math.prod(m.loops[i].bound for i in mine) <= op.sizes[d]:
            continue
        g = mine[0]
        if g in above and m.loops[g].bound > 1 and not any(i in above for i in mine[1:]):
            edges[g] = (d, min(ext[d], op.sizes[d] - (m.loops[g].bound - 1) * strides[g]))
    out: list[tuple[float, dict[str, int], dict[str, int], dict[str, int]]] = []
    for j, (n, shift) in classes.items():
        # (weight, old extents, new extents) over the edge states of the loops at or outside j
        cases = [(1.0, dict(ext), dict(ext))]
        for g, (d, e) in edges.items():
            b = m.loops[g].bound
            if g < j:
                p_edge = 1.0 / b
                split = [(p_edge, e, e), (1.0 - p_edge, ext[d], ext[d])]
            elif g == j:
                p_edge = 1.0 / (b - 1)
                split = [(p_edge, ext[d], e), (1.0 - p_edge, ext[d], ext[d])]
            else:
                # A loop outside g advances only when g is at its last position: g leaves its edge tile.
                split = [(1.0, e, ext[d])]
            cases = [(w * pw, {**eo, d: xo}, {**en, d: xn})
                     for w, eo, en in cases for pw, xo, xn in split if pw > 0]
        out.extend((n * w, eo, en, shift) for w, eo, en in cases)
    return out


def _burst_bound(op: Operator, arch: Accelerator, m: Mapping, raw: dict, c: int, busy: float) -> float:
    """A double buffer hides a load only behind the compute of one tile: transitions of each loop
    above ``c`` cost max(compute of a step, that loop's load), not the average of all loads.
    Returning partial sums (outputs with fills) load into the same halves and count too.

    The load when loop j advances is the first instance's exact tile delta (inner loops reset),
    with edge tiles of imperfect factors apart (``_edge_situations``); its share of the level's
    total fills scales it to the counted traffic.
    """
    lv, levels = arch.levels[c], arch.levels
    steps = math.prod(l.bound for l in m.loops if not l.spatial and l.level < c)
    if steps <= 1:
        return 0.0
    situations = _edge_situations(op, m, c)
    ext = _extents(op, m, c)
    loads = []
    for X in op.operands:
        chain = [i for i in range(len(levels)) if X.name in m.keep[i]]
        if c not in chain[1:]:
            continue
        p = chain[chain.index(c) - 1]
        cc, pc = raw[(c, X.name)], raw[(p, X.name)]
        axes = [(tuple(cf for _, cf in ix.terms), tuple(d for d, _ in ix.terms)) for ix in X.indices]
        full = tile_size(X, ext)
        deltas = []
        for _, eo, en, shift in situations:
            ov = 1
            for coeffs, ds in axes:
                ov *= axis_overlap(coeffs, tuple(eo[d] for d in ds), tuple(en[d] for d in ds),
                                   tuple(shift[d] for d in ds))
            deltas.append(max(0, tile_size(X, en) - ov) if all(en[d] > 0 for d in en) else 0)
        counted = full + sum(n * dl for (n, *_), dl in zip(situations, deltas, strict=True))
        if not counted or not cc.fills:
            continue
        nc, np_ = used_instances(m, c), used_instances(m, p)
        per_c = cc.fills * X.bits / nc / counted
        per_p = pc.reads * X.bits / np_ / counted
        loads.append([(lv.transfer_setup_cycles if dl else 0.0) +
                      max(_t(dl * per_c, lv.write_bw_bits), _t(dl * per_p, levels[p].read_bw_bits))
                      for dl in deltas])
    if not loads:
        return 0.0
    step = busy / steps
    return sum(n * max(step, sum(l[k] for l in loads)) for k, (n, *_) in enumerate(situations)) + step


def _transition_time(moves: list[tuple]) -> float:
    """Time from the end of a compute step to the next one's start while single-buffered levels
    change tiles. ``moves``: (level, operand, parent level, is output, load, store cycles); a load
    is None or (setup cycles, data cycles, the port that paces the data: the slower side's).
    Stores drain one after another, deepest level first. Each level's load unit takes its
    inputs, then its returning partial sums (which wait for their own drain); a load also waits
    for its operand's load into the parent at the same transition, and its data for the port
    it shares with earlier loads (in its free time, ``_fill``). Different levels' load units run
    side by side, beside the stores. The compute waits for all of them."""
    t_store, drained = 0.0, {}
    for c, x, _, out, _, st in sorted(moves, key=lambda mv: -mv[0]):
        if out:
            t_store += st
            drained[(c, x)] = t_store
    unit: dict[int, float] = {}
    port: dict[str, list] = {}
    loaded: dict[tuple, float] = {}
    for c, x, p, _out, ld, _ in sorted(moves, key=lambda mv: (mv[0], mv[3])):
        end = max(loaded.get((p, x), 0.0), drained.get((c, x), 0.0))
        if ld is not None:
            su, t, pt = ld
            end = max(end, unit.get(c, 0.0)) + su
            if t > 0:
                end = _fill(port.setdefault(pt, []), end, t)
            unit[c] = end
        loaded[(c, x)] = end
    return max([t_store] + list(loaded.values()))


def _fill(busy: list, t0: float, dur: float) -> float:
    """Move ``dur`` cycles of data from ``t0`` on in the free time of a port whose busy intervals
    are ``busy`` (sorted, disjoint; updated); returns the end. The bursts of different DMA
    engines interleave, so a transfer placed later can use the gaps before earlier ones."""
    cur, left, placed = t0, dur, []
    for s, e in busy:
        if e <= cur:
            continue
        if s > cur:
            take = min(left, s - cur)
            placed.append((cur, cur + take))
            left -= take
            cur += take
            if left <= 0:
                break
        cur = max(cur, e)
    if left > 0:
        placed.append((cur, cur + left))
        cur += left
    busy.extend(placed)
    busy.sort()
    return cur


def _single_buffer_stall(op: Operator, arch: Accelerator, m: Mapping, raw: dict, single: list[int]) -> float:
    """Compute waits while single-buffered levels change tiles. Per transition class (the loop
    that advances), the levels below that loop move the exact deltas of their operands, timed by
    ``_transition_time``. The first tiles load before any compute and the last ones drain after
    it (whole tiles)."""
    levels = arch.levels
    nlev = len(levels)
    moves: dict[int, list[tuple]] = {}         # loop index -> moves at its transitions
    counts: dict[int, int] = {}
    first: list[tuple] = []
    last = 0.0
    for c in single:
        classes = _transition_classes(op, m, c)
        ext = _extents(op, m, c)
        lc = levels[c]
        for X in op.operands:
            chain = [i for i in range(nlev) if X.name in m.keep[i]]
            if c not in chain[1:]:
                continue
            p = chain[chain.index(c) - 1]
            lp = levels[p]
            cc, pc = raw[(c, X.name)], raw[(p, X.name)]
            nc, np_ = used_instances(m, c), used_instances(m, p)
            full, deltas = _class_deltas(X, ext, classes)
            counted = full + sum(classes[j][0] * dl for j, dl in deltas.items())
            if not counted:
                continue
            ld_c, ld_p = cc.fills * X.bits / nc / counted, pc.reads * X.bits / np_ / counted
            st_c = cc.drains * X.bits / nc / counted if X.is_output else 0.0
            st_p = pc.updates * X.bits / np_ / counted if X.is_output else 0.0
            load = partial(_load_move, lc, lp, ld_c, ld_p)
            store = partial(_store_time, lc, lp, st_c, st_p)
            first.append((c, X.name, p, X.is_output, load(full), 0.0))
            last += store(full)
            for j, dl in deltas.items():
                if dl and (load(dl) is not None or store(dl)):
                    counts[j] = classes[j][0]
                    moves.setdefault(j, []).append((c, X.name, p, X.is_output, load(dl), store(dl)))
    return (_transition_time(first) + last +
            sum(counts[j] * _transition_time(mv) for j, mv in moves.items()))


def _load_move(lc: Level, lp: Level, ld_c: float, ld_p: float, n: int) -> tuple | None:
    """(setup, cycles, port) of loading ``n`` units into child level ``lc`` from parent ``lp`` (bits per unit
    ``ld_c`` written in the child, ``ld_p`` read from the parent); None when nothing moves."""
    if n <= 0 or (ld_c <= 0 and ld_p <= 0):
        return None
    tc, tp = _t(n * ld_c, lc.write_bw_bits), _t(n * ld_p, lp.read_bw_bits)
    return (lc.transfer_setup_cycles, tp, f"{lp.name}.read") if tp >= tc else \
        (lc.transfer_setup_cycles, tc, f"{lc.name}.write")


def _store_time(lc: Level, lp: Level, st_c: float, st_p: float, n: int) -> float:
    """Cycles to drain ``n`` units of an output from child level ``lc`` into parent ``lp``."""
    if n <= 0 or (st_c <= 0 and st_p <= 0):
        return 0.0
    return lc.transfer_setup_cycles + max(_t(n * st_c, lc.read_bw_bits), _t(n * st_p, lp.write_bw_bits))


def _heavier_half(op: Operator, m: Mapping, c: int) -> float:
    """Share of level c's output traffic that falls on the busier of its two buffer halves.

    Consecutive output tiles alternate between the halves. The output tile moves with the
    innermost temporal loop above c over an output dim; when that loop's positions that hold
    data are even in number, every half keeps the same positions, and an edge tile (the last
    position of an imperfect factor, smaller) always lands in the same half. Otherwise the
    halves share the traffic equally. (The positions are taken at the first iteration of the
    outer loops.)"""
    out_dims = op.output.dims
    strides = loop_strides(m)
    fast = next((i for i in reversed(range(len(m.loops))) if not m.loops[i].spatial and m.loops[i].level < c
                 and m.loops[i].bound > 1 and m.loops[i].dim in out_dims), None)
    if fast is None:
        return 0.5
    lf = m.loops[fast]
    ext = min(op.sizes[lf.dim], math.prod(l.bound for l in m.loops if l.dim == lf.dim and l.level >= c))
    n, even_sum, total = _position_sums(op.sizes[lf.dim], strides[fast], ext, lf.bound)
    if n % 2 or not total:
        return 0.5
    even = even_sum / total
    return max(even, 1.0 - even)


def _position_sums(size: int, stride: int, ext: int, bound: int) -> tuple[int, int, int]:
    """Of the tile sizes ``min(ext, size - k*stride)`` for k < bound that are positive: how many, the
    sum at even k, and the sum of all. Closed form (the list had as many entries as the loop bound):
    the first ``full`` positions hold ``ext``, the rest up to ``n`` an arithmetic series."""
    n = min(bound, -(-size // stride))                       # size - k*stride > 0  <=>  k < ceil(size/stride)
    full = min(n, (size - ext) // stride + 1) if size >= ext else 0

    def series(lo: int, parity: int | None) -> int:           # sum of size - k*stride, lo <= k < n
        k0 = lo + (1 if parity is not None and lo % 2 != parity else 0)
        step = 1 if parity is None else 2
        cnt = max(0, (n - k0 + step - 1) // step)
        return cnt * size - stride * (cnt * k0 + step * cnt * (cnt - 1) // 2)

    even_sum = ext * ((full + 1) // 2) + series(full, 0)
    total = ext * full + series(full, None)
    return n, even_sum, total


def _t(bits: float, bw: float | None) -> float:
    return 0.0 if bw is None or bits <= 0 else bits / bw


def latency_terms(op: Operator, arch: Accelerator, m: Mapping, raw: dict) -> LatencyTerms:
    """``raw`` maps (level index, operand name) to Counts."""
    nlev = len(arch.levels)
    levels = arch.levels
    ports: dict[str, float] = {}

    def use(port: str, t: float) -> None:
        ports[port] = ports.get(port, 0.0) + t

    temporal = m.temporal_product()
    macs = math.ceil(temporal / arch.compute.macs_per_cycle)
    # compute side: the reads and updates of the last level of every operand stream during compute
    stream = 0.0
    for X in op.operands:
        last = max(i for i in range(nlev) if X.name in m.keep[i])
        c, lv, n = raw[(last, X.name)], levels[last], used_instances(m, last)
        t_r = _t(c.reads * X.bits / n, lv.read_bw_bits)
        t_w = _t(c.updates * X.bits / n, lv.write_bw_bits) if X.is_output else 0.0
        use(f"{lv.name}.read", t_r)
        use(f"{lv.name}.write", t_w)
    stream = max(ports.values(), default=0.0)
    pipe = pipeline_overhead(op, arch, m)
    compute = max(macs, stream) + pipe

    load_unit: dict[int, float] = {}
    store_unit: dict[int, float] = {}
    tiles_at: dict[int, int] = {}
    pro: dict[int, float] = {}    # double-buffered levels: first loads, before any compute
    epi: dict[int, float] = {}    # ... and last drains, after all compute
    ring: dict[int, float] = {}   # double-buffered levels: output drains and partial-sum reloads
    setups = 0.0
    for X in op.operands:
        chain = [i for i in range(nlev) if X.name in m.keep[i]]
        for p, c in pairwise(chain):
            lc, lp = levels[c], levels[p]
            nc, np_ = used_instances(m, c), used_instances(m, p)
            cc, pc = raw[(c, X.name)], raw[(p, X.name)]
            tiles = tile_transfers(op, m, X.dims, c)
            tiles_at[c] = max(tiles_at.get(c, 1), tiles)
            ext = {d: min(op.sizes[d], math.prod(l.bound for l in m.loops if l.dim == d and l.level >= c))
                   for d in op.dim_names}
            first = tile_size(X, ext) * X.bits
            loads = [(cc.fills * X.bits / nc, pc.reads * X.bits / np_)]
            stores = [(cc.drains * X.bits / nc, pc.updates * X.bits / np_)] if X.is_output else []
            for kind, vols in (("load", loads), ("store", stores)):
                for child_bits, parent_bits in vols:
                    if child_bits <= 0 and parent_bits <= 0:
                        continue
                    if kind == "load":
                        tc, tp = _t(child_bits, lc.write_bw_bits), _t(parent_bits, lp.read_bw_bits)
                        use(f"{lc.name}.write", tc)
                        use(f"{lp.name}.read", tp)
                    else:
                        tc, tp = _t(child_bits, lc.read_bw_bits), _t(parent_bits, lp.write_bw_bits)
                        use(f"{lc.name}.read", tc)
                        use(f"{lp.name}.write", tp)
                    setup = tiles * lc.transfer_setup_cycles
                    setups += setup
                    busy = setup + max(tc, tp)
                    unit = load_unit if kind == "load" else store_unit
                    unit[c] = unit.get(c, 0.0) + busy
                    if lc.double_buffered and X.is_output:
                        ring[c] = ring.get(c, 0.0) + busy
                    if lc.double_buffered:
                        # the first tile (load) and the last tile (store) do not overlap compute
                        share = min(1.0, first / child_bits) if child_bits > 0 else 0.0
                        t_edge = lc.transfer_setup_cycles + max(tc, tp) * share
                        if kind == "load":
                            pro[c] = pro.get(c, 0.0) + t_edge
                        else:
                            epi[c] = epi.get(c, 0.0) + t_edge
                        if X.is_output:
                            # the first reload and the last drain are in the prologue and epilogue
                            ring[c] -= t_edge
    single = [c for c in range(1, nlev) if not levels[c].double_buffered
              and (load_unit.get(c, 0.0) or store_unit.get(c, 0.0))]
    stall = _single_buffer_stall(op, arch, m, raw, single)
    edge = sum(pro.values()) + sum(epi.values())
    # A double-buffered level's units overlap compute between its first load and last drain;
    # when they are the bottleneck, the compute of the last tile still follows its load.
    busy = compute + stall
    overlapped = max([load_unit.get(c, 0.0) - pro.get(c, 0.0) + busy / tiles_at[c] for c in pro] +
                     [store_unit.get(c, 0.0) - epi.get(c, 0.0) + busy / tiles_at[c] for c in epi] + [0.0])
    transfer = {lv.name: max(ports.get(f"{lv.name}.read", 0.0), ports.get(f"{lv.name}.write", 0.0),
                             load_unit.get(i, 0.0), store_unit.get(i, 0.0))
                for i, lv in enumerate(levels)}
    bursty = max((_burst_bound(op, arch, m, raw, c, busy) for c in pro), default=0.0)
    # Two halves, three stages: a tile's output half is computed, drained, refilled with the
    # partial sums of the tile two ahead, and only then computed again, so every two tiles take
    # at least compute + drain + reload of one: half the sum over the run.
    cycle = max([busy / 2 + _heavier_half(op, m, c) * max(r, 0.0) for c, r in ring.items()] + [0.0])
    inner = max(busy, overlapped, bursty, cycle)
    latency = max(inner + edge, max(ports.values(), default=0.0))
    parts = (("MAC schedule", float(macs)), ("compute-side streaming", max(macs, stream) - macs),
             ("pipeline overheads", pipe), ("single-buffer stalls", stall),
             ("double-buffered transfers not hidden", inner - busy), ("prologue and epilogue", edge),
             ("busiest memory port beyond that", latency - inner - edge))
    return LatencyTerms(macs, transfer, stall + edge, latency, pipe, setups, parts)
