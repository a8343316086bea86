"""Vectorized cost of many perfectly factored tilings of one loop structure.

A structure is the nest with its loops' dimensions, levels and axes fixed; a
row of ``bounds`` gives every loop's bound. Loops of bound 1 change no count
and no latency term, so one structure that lists every dimension at every
slot covers every perfect tiling with the given per-level orders.

Counting follows ``access_counts.entering_perfect`` term by term; energy
follows ``model.evaluate`` and latency follows ``latency.latency_terms``
(tile transfers, DMA setup, the Eq. 4.1 pipeline, single-buffer stalls,
double-buffer prologue, epilogue and bursts, port occupancy), all with NumPy
arrays over rows. Every result must agree with the scalar model exactly
(tests/test_cost_batch.py). Rows whose sliding-window axis is not a
contiguous interval (stride larger than the dilated window and coprime with
it) are evaluated by the scalar model; they are rare.
"""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.model import check_countable, evaluate
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.workload.operator import Operand, Operator

Structure = list[tuple[str, int, str | None]]

# Rows x loop slots per piece of a large batch (see evaluate_batch).
CLASS_ELEMENTS = 32768


def _axis_size(coeffs, exts):
    """Size of {sum c*x} for one or two terms, or -1 where it has holes (scalar fallback)."""
    if len(coeffs) == 1:
        return exts[0]
    if len(coeffs) > 2:
        return np.full_like(exts[0], -1)
    (c1, c2), (e1, e2) = coeffs, exts
    g = math.gcd(c1, c2)
    a, b = c1 // g, c2 // g
    size = np.full_like(e1, -1)
    # One term fixed: an arithmetic progression of the other.
    size = np.where(e2 == 1, e1, np.where(e1 == 1, e2, size))
    # Windows that touch or overlap: one interval (in steps of the gcd).
    if a == 1:
        size = np.where((e1 > 1) & (e2 > 1) & (b <= e1), b * (e2 - 1) + e1, size)
    if b == 1:
        size = np.where((e1 > 1) & (e2 > 1) & (a <= e2), a * (e1 - 1) + e2, size)
    return size


def _axis_overlap(coeffs, exts, shifts, size):
    """|A ∩ (A + shift)| where A is an interval (in gcd steps) or a progression of one term."""
    if len(coeffs) == 1:
        return np.maximum(0, exts[0] - np.abs(shifts[0]))
    (c1, c2), (e1, e2) = coeffs, exts
    g = math.gcd(c1, c2)
    off = np.abs(c1 * shifts[0] + c2 * shifts[1])
    interval = np.maximum(0, size - off // g)
    prog1 = np.where(off % c1 == 0, np.maximum(0, e1 - off // c1), 0)
    prog2 = np.where(off % c2 == 0, np.maximum(0, e2 - off // c2), 0)
    # A progression of one term when the other extent is 1 (both 1: a single point, off 0 or not).
    return np.where((e1 > 1) & (e2 > 1), interval, np.where(e2 == 1, prog1, prog2))


def _axes(X: Operand):
    return [(tuple(cf for _, cf in ix.terms), tuple(d for d, _ in ix.terms)) for ix in X.indices]


def axis_sizes(X: Operand, ext: dict[str, np.ndarray]) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Per row, for tiles of extents ``ext``: each axis' size of X (-1 where holed), the points of
    X touched (holed axes counted 0) and a mask of rows with a holed axis."""
    axes = [_axis_size(cf, [ext[d] for d in ds]) for cf, ds in _axes(X)]
    n = len(next(iter(ext.values())))
    tile = np.ones(n, dtype=np.int64)
    holes = np.zeros(n, dtype=bool)
    for a in axes:
        tile = tile * np.maximum(a, 0)
        holes |= a < 0
    return axes, tile, holes


def tile_sizes(X: Operand, ext: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Points of X touched by tiles of extents ``ext`` per row, and a mask of rows with holed axes."""
    return axis_sizes(X, ext)[1:]


def _t(bits: np.ndarray, bw: float | None) -> np.ndarray:
    if bw is None:
        return np.zeros_like(bits, dtype=float)
    return np.where(bits > 0, bits / bw, 0.0)


class _Nest:
    """The per-row quantities every term needs: strides, inner extents, instances."""

    def __init__(self, op: Operator, arch: Accelerator, structure: Structure, B: np.ndarray):
        self.op, self.arch, self.structure, self.B = op, arch, structure, B
        n, L = B.shape
        self.n = n
        self.nlev = nlev = len(arch.levels)
        # Stride of each loop: product of the bounds of later loops of the same dimension.
        self.stride = np.ones_like(B)
        for d in dict.fromkeys(s[0] for s in structure):
            js = [j for j, s in enumerate(structure) if s[0] == d]
            if len(js) > 1:
                self.stride[:, js[:-1]] = np.cumprod(B[:, js[:0:-1]], axis=1)[:, ::-1]
        # inner[c][d]: extent of d inside level c (every loop at c or deeper), built deepest first
        self.inner: list[dict[str, np.ndarray]] = [{} for _ in range(nlev + 1)]
        ext = {d: np.ones(n, dtype=np.int64) for d in op.dim_names}
        self.inner[nlev] = ext
        for c in range(nlev - 1, -1, -1):
            ext = dict(ext)
            for j, (d, lv, _) in enumerate(structure):
                if lv == c:
                    ext[d] = ext[d] * B[:, j]
            self.inner[c] = ext
        self.temporal_slots = [j for j, s in enumerate(structure) if s[2] is None]
        self.total = np.prod(B, axis=1)
        self.temporal = np.prod(B[:, self.temporal_slots], axis=1) if self.temporal_slots else np.ones(n, np.int64)
        self._used: dict[int, np.ndarray] = {}
        self._classes: dict[int, tuple] = {}
        self._all_classes: tuple | None = None
        self._deltas: dict[tuple[str, int], tuple] = {}
        self._sizes: dict[tuple[str, int], tuple] = {}

    def used(self, level: int) -> np.ndarray:
        """Instances of ``level`` the rows occupy: product of the spatial loops above it."""
        if level not in self._used:
            out = np.ones(self.n, dtype=np.int64)
            for j, (_, lv, ax) in enumerate(self.structure):
                if ax is not None and lv < level:
                    out = out * self.B[:, j]
            self._used[level] = out
        return self._used[level]

    def sizes(self, X: Operand, c: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """X's tile at level c per row: each axis' size (-1 where holed), the whole tile
        (holed axes counted 0) and the rows with a holed axis."""
        key = (X.name, c)
        if key not in self._sizes:
            self._sizes[key] = axis_sizes(X, self.inner[c])
        return self._sizes[key]

    def above(self, c: int) -> list[int]:
        return [j for j in self.temporal_slots if self.structure[j][1] < c]


def _entering(nest: _Nest, X: Operand, c: int, fallback: np.ndarray) -> np.ndarray:
    """Elements of X entering level c over the run: the first tile plus, per transition class,
    transitions x the elements that change (``_deltas``), times the instances in use."""
    fallback |= nest.sizes(X, c)[2]
    return nest.used(c) * _deltas(nest, X, c)[2]


def batch_counts(nest: _Nest, keep, fallback: np.ndarray) -> dict[tuple[int, str], list[np.ndarray]]:
    """(level, operand) -> [fills, reads, updates, drains] per row, as ``model.access_counts``."""
    op, arch, structure, B, n, nlev = nest.op, nest.arch, nest.structure, nest.B, nest.n, nest.nlev
    n_out = op.footprint(op.output)
    init_read = 1 if op.init_output == "read" else 0
    zero = np.zeros(n, dtype=np.int64)
    counts = {(i, X.name): [zero.copy() for _ in range(4)] for X in op.operands for i in range(nlev)
              if X.name in keep[i]}

    def merged_product(X, lo, hi):
        out = np.ones(n, dtype=np.int64)
        for j, (d, lv, ax) in enumerate(structure):
            if ax is not None and lo <= lv < hi and d not in X.dims:
                if X.is_output or arch.fanout_axis(lv, ax).multicast:
                    out = out * B[:, j]
        return out

    def lineages(X, level):
        out = np.ones(n, dtype=np.int64)
        for j, (d, lv, ax) in enumerate(structure):
            if ax is not None and lv < level and d not in X.dims:
                out = out * B[:, j]
        return out

    for X in op.operands:
        chain = [i for i in range(nlev) if X.name in keep[i]]
        for p, c in pairwise(chain):
            member = _entering(nest, X, c, fallback)
            group = member // merged_product(X, p, c)
            cc, pc = counts[(c, X.name)], counts[(p, X.name)]
            if X.is_output:
                down = group - n_out * (lineages(X, p) - init_read)
                cc[0] += down
                pc[1] += down
                cc[3] += member
                pc[2] += group
            else:
                cc[0] += member
                pc[1] += group
        last = chain[-1]
        g = nest.total // merged_product(X, last, nlev)
        lc = counts[(last, X.name)]
        if X.is_output:
            lc[2] += g
            lc[1] += g - n_out * (lineages(X, last) - init_read)
        else:
            lc[1] += g
    return counts


def batch_energy(nest: _Nest, keep, counts) -> np.ndarray:
    op, arch, nlev = nest.op, nest.arch, nest.nlev
    energy = np.full(nest.n, float(op.macs * arch.compute.mac_energy_pj))
    for (i, name), (fills, reads, updates, drains) in counts.items():
        lv = arch.levels[i]
        scale = op.operand(name).bits / lv.width_bits
        energy += (reads + drains) * (lv.read_energy_pj * scale) + (fills + updates) * (lv.write_energy_pj * scale)
    for X in op.operands:
        chain = [i for i in range(nlev) if X.name in keep[i]] + [nlev]
        for p, c in pairwise(chain):
            for f in range(p, c):
                fo = arch.levels[f].fanout
                if fo is None or not fo.transfer_energy_pj:
                    continue
                unit = fo.transfer_energy_pj * X.bits / arch.levels[f].width_bits
                if c == nlev:
                    energy += op.macs * (2 if X.is_output else 1) * unit
                else:
                    cc = counts[(c, X.name)]
                    energy += (cc[0] + cc[3]) * unit
    return energy


def _pipeline(nest: _Nest) -> np.ndarray:
    pipe = nest.arch.compute.pipeline
    if pipe is None:
        return np.zeros(nest.n)
    out_dims = nest.op.output.dims
    in_suffix = np.ones(nest.n, dtype=bool)
    suffix = np.ones(nest.n, dtype=np.int64)
    streamed = np.ones(nest.n, dtype=np.int64)
    for j in reversed(nest.temporal_slots):
        d, b = nest.structure[j][0], nest.B[:, j]
        if d in out_dims:
            in_suffix &= b == 1
            continue
        f = np.where(in_suffix, b, 1)
        suffix *= f
        if d in pipe.streamed_dims:
            streamed *= f
    results = nest.temporal // suffix
    rows = nest.temporal // streamed
    return (rows * pipe.row_setup_cycles + results * pipe.result_overhead_cycles).astype(float)


def _tile_transfers(nest: _Nest, dims: frozenset[str], c: int) -> np.ndarray:
    """Tile transfers into level c of an operand over ``dims``: one, plus the transitions of every
    loop above c that moves the tile (its own dim is the operand's, or a loop inside it over the
    operand's dims has a bound above 1 and resets)."""
    above = nest.above(c)
    if not above:
        return np.ones(nest.n, dtype=np.int64)
    cnt, _ = _classes(nest, c)
    mine = np.array([nest.structure[j][0] in dims for j in above])
    ind = mine[None, :] & (nest.B[:, above] > 1)
    inner = np.zeros_like(ind)
    inner[:, :-1] = np.logical_or.accumulate(ind[:, :0:-1], axis=1)[:, ::-1]
    return 1 + ((mine[None, :] | inner) * cnt.T).sum(axis=1)


def _classes(nest: _Nest, c: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``latency._transition_classes`` per row, one row of the matrices per temporal loop above
    ``c`` (k-th row: k-th slot of ``nest.above(c)``): transitions (classes x rows; zero where the
    bound is 1) and, per dim, the shift of the tile when that loop advances (its stride on its
    own dim, minus the span of every loop inside it above c, which resets). Dims no loop above c
    iterates are left out (no shift).

    The slots above c are a prefix of all temporal slots (the structure runs outermost level
    first), so everything is computed once over all of them: a prefix's transitions are the
    same, and its resets are the full suffix sums less what lies below c."""
    if c in nest._classes:
        return nest._classes[c]
    if nest._all_classes is None:
        B, n = nest.B, nest.n
        ts = nest.temporal_slots
        K = len(ts)
        Ba = B[:, ts]
        outer = np.ones((n, K), dtype=np.int64)
        if K > 1:
            outer[:, 1:] = np.cumprod(Ba[:, :-1], axis=1)
        cnt = ((Ba - 1) * outer).T
        dims_of = [nest.structure[j][0] for j in ts]
        names = list(dict.fromkeys(dims_of))
        M = np.array([[x == d for x in dims_of] for d in names]).reshape(len(names), K, 1)
        back = M * ((Ba - 1) * nest.stride[:, ts]).T[None]           # dims x slots x rows
        suffix = np.zeros((len(names), K + 1, n), dtype=np.int64)     # suffix[:, k]: sum over slots >= k
        suffix[:, :K] = np.cumsum(back[:, ::-1], axis=1)[:, ::-1]
        shift = M * nest.stride[:, ts].T[None] - (suffix[:, :K] - back)
        nest._all_classes = (cnt, names, dims_of, shift, suffix)
    cnt, names, dims_of, shift, suffix = nest._all_classes
    K = len(nest.above(c))
    present = set(dims_of[:K])
    shifts = {d: shift[i, :K] + suffix[i, K] for i, d in enumerate(names) if d in present}
    nest._classes[c] = cnt[:K], shifts
    return nest._classes[c]


def _deltas(nest: _Nest, X: Operand, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``latency._class_deltas`` per row: whole tile, elements entering per class (classes x
    rows), and the elements counted over the run (tile + transitions x deltas)."""
    key = (X.name, c)
    if key in nest._deltas:
        return nest._deltas[key]
    ext = nest.inner[c]
    cnt, shifts = _classes(nest, c)
    axis_sizes, full, _ = nest.sizes(X, c)
    ov = np.broadcast_to(np.ones(1, dtype=np.int64), cnt.shape)
    for (cf, ds), size in zip(_axes(X), axis_sizes, strict=True):
        size = np.maximum(size, 0)
        if any(d in shifts for d in ds):
            zero = np.zeros(cnt.shape, dtype=np.int64)
            o = _axis_overlap(cf, [ext[d] for d in ds], [shifts.get(d, zero) for d in ds], size)
        else:
            o = size             # an axis that does not shift overlaps whole (holed rows fall back)
        ov = ov * o
    dl = full - ov
    counted = full + (cnt * dl).sum(axis=0)
    nest._deltas[key] = full, dl, counted
    return full, dl, counted


def _burst(nest: _Nest, keep, counts, c: int, busy: np.ndarray) -> np.ndarray:
    """``latency._burst_bound`` per row."""
    op, arch, B, n = nest.op, nest.arch, nest.B, nest.n
    levels = arch.levels
    lv = levels[c]
    above = nest.above(c)
    if not above:
        return np.zeros(n)
    steps = np.prod(B[:, above], axis=1)
    cnt, _ = _classes(nest, c)
    total_load = np.zeros(cnt.shape)
    any_load = np.zeros(n, dtype=bool)
    for X in op.operands:
        chain = [i for i in range(nest.nlev) if X.name in keep[i]]
        if c not in chain[1:]:
            continue          # returning partial sums (outputs with fills) count like inputs
        p = chain[chain.index(c) - 1]
        fills, reads_p = counts[(c, X.name)][0], counts[(p, X.name)][1]
        full, dl, counted = _deltas(nest, X, c)
        valid = (counted != 0) & (fills != 0)
        any_load |= valid
        safe = np.where(valid, counted, 1)
        per_c = fills * X.bits / nest.used(c) / safe
        per_p = reads_p * X.bits / nest.used(p) / safe
        t = (np.where(dl != 0, lv.transfer_setup_cycles, 0.0) +
             np.maximum(_t(dl * per_c, lv.write_bw_bits), _t(dl * per_p, levels[p].read_bw_bits)))
        total_load += np.where(valid, t, 0.0)
    step = busy / steps
    out = step + (cnt * np.maximum(step, total_load)).sum(axis=0)
    return np.where((steps > 1) & any_load, out, 0.0)


def _transition_time(moves: list[tuple], n: int) -> np.ndarray:
    """``latency._transition_time`` per row. ``moves``: (level, operand, parent, is output, load,
    store cycles, present) in the scalar model's order, a load being (moves data, setup, data
    cycles, paced by the parent's read port rather than the child's write port, the two port
    names); a move absent from a row (``present`` false) is left out of that row's schedule."""
    zero = np.zeros(n)
    t_store, drained = zero, {}
    for c, x, _, out, _, st, present in sorted(moves, key=lambda mv: -mv[0]):
        if out:
            t_store = t_store + np.where(present, st, 0.0)
            drained[(c, x)] = np.where(present, t_store, 0.0)
    unit: dict[int, np.ndarray] = {}
    port: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    loaded: dict[tuple, np.ndarray] = {}
    last = t_store
    for c, x, p, _out, ld, _, present in sorted(moves, key=lambda mv: (mv[0], mv[3])):
        has_ld, su, t, to_parent, p_port, c_port = ld
        end = np.maximum(loaded.get((p, x), zero), drained.get((c, x), zero))
        has = present & has_ld
        e = np.maximum(end, unit.get(c, zero)) + su
        for name, side in ((p_port, to_parent), (c_port, ~to_parent)):
            paced = has & (t > 0) & side
            if paced.any():
                e = np.where(paced, _fill(port, name, e, t, paced), e)
        end = np.where(has, e, end)
        unit[c] = np.where(has, end, unit.get(c, zero))
        loaded[(c, x)] = np.where(present, end, 0.0)
        last = np.maximum(last, loaded[(c, x)])
    return last


def _fill(port: dict, name: str, t0: np.ndarray, dur: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``latency._fill`` per row: move ``dur`` cycles from ``t0`` on in the free time of port
    ``name`` (busy intervals as arrays, +inf where a row has fewer); only ``rows`` are placed."""
    inf = np.inf
    if name not in port:
        # an idle port: the transfer runs from t0 on (rows placed only where it moves data)
        placed = rows & (dur > 0)
        if placed.any():
            port[name] = (np.where(placed, t0, inf)[None], np.where(placed, t0 + dur, inf)[None])
        return np.where(placed, t0 + dur, t0)
    S, E = port[name]
    cur, left = t0.copy(), np.where(rows, dur, 0.0)
    done = ~rows
    new_s, new_e = [], []
    for k in range(S.shape[0]):
        s, e = S[k], E[k]
        skip = done | (e <= cur)
        gap = ~skip & (s > cur)
        take = np.where(gap, np.minimum(left, s - cur), 0.0)
        new_s.append(np.where(gap, cur, inf))
        new_e.append(np.where(gap, cur + take, inf))
        left = left - take
        cur = cur + take
        done = done | (gap & (left <= 0))
        cur = np.where(~skip & ~done, np.maximum(cur, e), cur)
    rest = ~done & (left > 0)
    new_s.append(np.where(rest, cur, inf))
    new_e.append(np.where(rest, cur + left, inf))
    cur = np.where(rest, cur + left, cur)
    S = np.concatenate([S, np.array(new_s)])
    E = np.concatenate([E, np.array(new_e)])
    order = np.argsort(S, axis=0, kind="stable")
    S, E = np.take_along_axis(S, order, axis=0), np.take_along_axis(E, order, axis=0)
    keep = ~np.all(np.isinf(S), axis=1)
    port[name] = (S[keep], E[keep])
    return cur


def _single_stall(nest: _Nest, keep, counts, on: dict[int, np.ndarray]) -> np.ndarray:
    """``latency._single_buffer_stall`` per row; ``on[c]``: rows where single-buffered level c moves data.

    The first fill and every transition class are scheduled in one ``_transition_time`` call
    over stacked copies of the rows (block 0: first tiles, block k: class of the k-th temporal
    slot), a move absent from a block being marked not present: one schedule instead of one
    per class, which is most of this model's per-call cost. The slots above a level are a
    prefix of the slots above any deeper level (the structure runs outermost level first), and
    a slot's transitions do not depend on the level, so the deepest level's classes index all."""
    op, levels, n = nest.op, nest.arch.levels, nest.n
    deepest = max(on)
    trans, _ = _classes(nest, deepest)
    K = trans.shape[0]
    nb = K + 1
    moves = []
    last = np.zeros(n)
    for c, active_c in on.items():
        lc = levels[c]
        for X in op.operands:
            chain = [i for i in range(nest.nlev) if X.name in keep[i]]
            if c not in chain[1:]:
                continue
            p = chain[chain.index(c) - 1]
            lp = levels[p]
            cc, pc = counts[(c, X.name)], counts[(p, X.name)]
            nc, np_ = nest.used(c), nest.used(p)
            full, dl, counted = _deltas(nest, X, c)
            valid = active_c & (counted != 0)
            safe = np.where(valid, counted, 1)
            k = np.zeros((nb, n), dtype=np.int64)
            k[0] = full
            k[1:1 + len(dl)] = dl
            k = k.reshape(-1)
            ld_c, ld_p = np.tile(cc[0] * X.bits / nc / safe, nb), np.tile(pc[1] * X.bits / np_ / safe, nb)
            # (moves data?, setup, data cycles, paced by the parent's read port?, port names)
            tc, tp = _t(k * ld_c, lc.write_bw_bits), _t(k * ld_p, lp.read_bw_bits)
            load = ((k > 0) & ((ld_c > 0) | (ld_p > 0)), lc.transfer_setup_cycles, np.maximum(tc, tp),
                    tp >= tc, f"{lp.name}.read", f"{lc.name}.write")
            if X.is_output:
                st_c, st_p = np.tile(cc[3] * X.bits / nc / safe, nb), np.tile(pc[2] * X.bits / np_ / safe, nb)
                store = lc.transfer_setup_cycles + np.maximum(_t(k * st_c, lc.read_bw_bits),
                                                              _t(k * st_p, lp.write_bw_bits))
                store = np.where((k > 0) & ((st_c > 0) | (st_p > 0)), store, 0.0)
            else:
                store = np.zeros(nb * n)
            last = last + np.where(valid, store[:n], 0.0)
            store[:n] = 0.0                  # the first tiles only load; the last ones drain after compute
            present = np.tile(valid, nb)
            present[(1 + len(dl)) * n:] = False
            present[n:] &= (k[n:] != 0) & (load[0][n:] | (store[n:] != 0))
            moves.append((c, X.name, p, X.is_output, load, store, present))
    T = _transition_time(moves, nb * n)
    return T[:n] + last + (trans * T[n:].reshape(K, n)).sum(axis=0)


def batch_latency(nest: _Nest, keep, counts) -> tuple[np.ndarray, np.ndarray]:
    """(latency, MAC-schedule cycles) per row, as ``latency.latency_terms``."""
    op, arch, n, nlev = nest.op, nest.arch, nest.n, nest.nlev
    levels = arch.levels
    zeros = lambda: np.zeros(n)  # noqa: E731
    ports: dict[str, np.ndarray] = {}

    def use(port: str, t: np.ndarray) -> None:
        ports[port] = ports[port] + t if port in ports else t

    macs = -(-nest.temporal // arch.compute.macs_per_cycle)
    for X in op.operands:
        last = max(i for i in range(nlev) if X.name in keep[i])
        c, lv, inst = counts[(last, X.name)], levels[last], nest.used(last)
        use(f"{lv.name}.read", _t(c[1] * X.bits / inst, lv.read_bw_bits))
        use(f"{lv.name}.write", _t(c[2] * X.bits / inst, lv.write_bw_bits) if X.is_output else zeros())
    stream = np.max(np.stack(list(ports.values())), axis=0)
    compute = np.maximum(macs, stream) + _pipeline(nest)

    load_unit: dict[int, np.ndarray] = {}
    store_unit: dict[int, np.ndarray] = {}
    tiles_at: dict[int, np.ndarray] = {}
    pro: dict[int, np.ndarray] = {}
    pro_on: dict[int, np.ndarray] = {}
    epi: dict[int, np.ndarray] = {}
    epi_on: dict[int, np.ndarray] = {}
    ring: dict[int, np.ndarray] = {}     # double-buffered levels: output drains and partial-sum reloads
    add = lambda d, c, v: d.__setitem__(c, d[c] + v if c in d else v)  # noqa: E731
    orr = lambda d, c, v: d.__setitem__(c, d[c] | v if c in d else v)  # noqa: E731
    for X in op.operands:
        chain = [i for i in range(nlev) if X.name in keep[i]]
        for p, c in pairwise(chain):
            lc, lp = levels[c], levels[p]
            nc, np_ = nest.used(c), nest.used(p)
            cc, pc = counts[(c, X.name)], counts[(p, X.name)]
            tiles = _tile_transfers(nest, X.dims, c)
            tiles_at[c] = np.maximum(tiles_at[c], tiles) if c in tiles_at else np.maximum(tiles, 1)
            first = nest.sizes(X, c)[1] * X.bits
            vols = [("load", cc[0] * X.bits / nc, pc[1] * X.bits / np_)]
            if X.is_output:
                vols.append(("store", cc[3] * X.bits / nc, pc[2] * X.bits / np_))
            for kind, child_bits, parent_bits in vols:
                active = (child_bits > 0) | (parent_bits > 0)
                if kind == "load":
                    tc, tp = _t(child_bits, lc.write_bw_bits), _t(parent_bits, lp.read_bw_bits)
                    use(f"{lc.name}.write", tc)
                    use(f"{lp.name}.read", tp)
                else:
                    tc, tp = _t(child_bits, lc.read_bw_bits), _t(parent_bits, lp.write_bw_bits)
                    use(f"{lc.name}.read", tc)
                    use(f"{lp.name}.write", tp)
                setup = np.where(active, tiles * lc.transfer_setup_cycles, 0.0)
                add(load_unit if kind == "load" else store_unit, c, setup + np.maximum(tc, tp))
                if lc.double_buffered and X.is_output:
                    add(ring, c, setup + np.maximum(tc, tp))
                if lc.double_buffered:
                    share = np.where(child_bits > 0, np.minimum(1.0, first / np.where(child_bits > 0, child_bits, 1)), 0.0)
                    edge = np.where(active, lc.transfer_setup_cycles + np.maximum(tc, tp) * share, 0.0)
                    if kind == "load":
                        add(pro, c, edge)
                        orr(pro_on, c, active)
                    else:
                        add(epi, c, edge)
                        orr(epi_on, c, active)
                    if X.is_output:
                        # the first reload and the last drain are in the prologue and epilogue
                        add(ring, c, -edge)
    get = lambda d, c: d.get(c, 0.0)  # noqa: E731
    on = {c: (get(load_unit, c) != 0) | (get(store_unit, c) != 0) for c in range(1, nlev)
          if not levels[c].double_buffered and (c in load_unit or c in store_unit)}
    stall = _single_stall(nest, keep, counts, on) if on else zeros()
    edge = sum(pro.values(), zeros()) + sum(epi.values(), zeros())
    busy = compute + stall
    overlapped = zeros()
    for c in pro:
        overlapped = np.maximum(overlapped, np.where(pro_on[c], get(load_unit, c) - pro[c] + busy / tiles_at[c], 0.0))
    for c in epi:
        overlapped = np.maximum(overlapped, np.where(epi_on[c], get(store_unit, c) - epi[c] + busy / tiles_at[c], 0.0))
    bursty = zeros()
    for c in pro:
        bursty = np.maximum(bursty, np.where(pro_on[c], _burst(nest, keep, counts, c, busy), 0.0))
    cycle = zeros()
    for r in ring.values():
        # perfect tilings: full tiles alternate evenly between the halves (latency._heavier_half = 1/2)
        cycle = np.maximum(cycle, busy / 2 + 0.5 * np.maximum(r, 0.0))
    port_max = np.max(np.stack(list(ports.values())), axis=0)
    latency = np.maximum(np.maximum(np.maximum(np.maximum(busy, overlapped), bursty), cycle) + edge, port_max)
    return latency, macs


def evaluate_batch(op: Operator, arch: Accelerator, structure: Structure, keep: tuple[frozenset[str], ...],
                   bounds: np.ndarray, latency: bool = True) -> dict[str, np.ndarray]:
    """Energy, latency, EDP and MAC-schedule cycles of every row of ``bounds`` (rows x loops)."""
    check_countable(op)
    B = np.asarray(bounds, dtype=np.int64)
    if B.ndim != 2 or B.shape[1] != len(structure):
        raise ValueError(f"bounds must be rows x {len(structure)} loops, got shape {B.shape}")
    # The per-class terms hold (classes x rows) matrices and the single-buffer schedule stacks
    # (classes + 1) copies of the rows: past a few tens of thousands of elements they fall out
    # of cache and a large batch is faster in pieces.
    piece = max(256, CLASS_ELEMENTS // max(1, len(structure)))
    if len(B) > piece:
        parts = [evaluate_batch(op, arch, structure, keep, B[s:s + piece], latency)
                 for s in range(0, len(B), piece)]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    # Slots of bound 1 in every row change nothing: drop them (the per-slot work is quadratic).
    live = [j for j in range(B.shape[1]) if (B[:, j] != 1).any()]
    if len(live) < B.shape[1]:
        structure, B = [structure[j] for j in live], B[:, live]
    nest = _Nest(op, arch, structure, B)
    fallback = np.zeros(nest.n, dtype=bool)
    counts = batch_counts(nest, keep, fallback)
    out = {"energy": batch_energy(nest, keep, counts),
           "compute_cycles": -(-nest.temporal // arch.compute.macs_per_cycle)}
    if latency:
        out["latency"] = batch_latency(nest, keep, counts)[0]
    if fallback.any():
        for r in np.nonzero(fallback)[0]:
            res = evaluate(op, arch, structure_mapping(structure, keep, B[r]), check=False)
            out["energy"][r] = res.energy_total
            if latency:
                out["latency"][r] = res.latency
    if latency:
        out["edp"] = out["energy"] * out["latency"]
    return out


def structure_mapping(structure: Structure, keep, row) -> Mapping:
    """The Mapping of one row (loops of bound 1 dropped)."""
    return Mapping(tuple(Loop(d, int(b), lv, ax) for (d, lv, ax), b in zip(structure, row, strict=True) if b > 1), keep)
