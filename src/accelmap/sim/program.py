"""The tile program of a mapping: steps, the transfers at each step, the compute of each step.

A *step* is one iteration of the temporal loops above the deepest level that
receives transfers (the compute unit runs everything below it in one go). A
level ``c`` moves to its next tile at a step where a temporal loop above ``c``
advances. The data each transition moves is the exact tile delta of the first
instance (every instance of a perfectly factored mapping moves the same); the
per-step volumes of one (level, operand) are scaled so that their sum over the
run equals the cost model's access counts, which the generated C code checks
element by element. Edge instances of imperfect tiles move less than the first
one; the scale factor spreads that difference evenly and is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.latency import pipeline_overhead, streamed_drain, streamed_tile, used_instances
from accelmap.cost.model import access_counts
from accelmap.cost.nest_rows import NestRows, output_bits
from accelmap.mapping.loopnest import Mapping, loop_strides
from accelmap.workload.index_sets import axis_overlap, axis_size
from accelmap.workload.operator import Operator


@dataclass
class TransferStream:
    """Every transfer of one operand between a level and its parent, in program order."""

    level: int                    # child level: its DMA engine does the transfer
    parent: int
    operand: str
    is_output: bool
    step: np.ndarray              # global step at which the child level starts each of its tiles
    load_bits: np.ndarray         # per child tile: bits into the child (per child instance)
    load_parent_bits: np.ndarray  # per child tile: bits read from the parent (per parent instance)
    store_bits: np.ndarray        # per child tile: bits drained from the child when it leaves (outputs)
    store_parent_bits: np.ndarray # ... and written into the parent (per parent instance)
    scale: float = 1.0            # model total / first-instance total (1 for perfect mappings)
    # the child's only tile, streamed in pieces at its driver's tiles (``stream_single_tile``): a
    # piece overwrites nothing, so it waits for no release, and the pieces are one DMA (one setup)
    streamed: bool = False


@dataclass
class TileProgram:
    op: Operator
    arch: Accelerator
    mapping: Mapping
    n_steps: int
    step_level: int | None                 # the level whose tiles the steps walk
    mac_cycles: int                        # per step
    pipeline_cycles: float                 # per step (Eq. 4.1-style overheads, evenly spread)
    stream_bits: dict[int, tuple[float, float]]   # level -> (read, write) bits per instance per step, compute side
    transfers: list[TransferStream] = field(default_factory=list)


def _unique_rows(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, axis=0, return_inverse=True)``, fast: rows packed into one integer when they fit."""
    lo = key.min(axis=0)
    span = key.max(axis=0) - lo + 1
    if float(np.prod(span.astype(np.float64))) < 2.0 ** 62:
        mult = np.cumprod(np.concatenate([[1], span[::-1][:-1]]))[::-1].astype(np.int64)
        packed = (key - lo) @ mult
        _, first, inv = np.unique(packed, return_index=True, return_inverse=True)
        return key[first], inv
    return np.unique(key, axis=0, return_inverse=True)


def _digits(n_steps: int, bounds: list[int]) -> np.ndarray:
    """Digits of every step in mixed radix over the loops above L (outermost first)."""
    digits = np.zeros((n_steps, len(bounds)), dtype=np.int64)
    rest = np.arange(n_steps, dtype=np.int64)
    for k in reversed(range(len(bounds))):
        digits[:, k] = rest % bounds[k]
        rest //= bounds[k]
    return digits


def _perfect_deltas(op: Operator, arch: Accelerator, X, loops: list, strides: list[int], above: list[int], c: int,
                    classes: np.ndarray) -> np.ndarray:
    """Elements of X that enter level c at each of its transitions (``classes``: the position in
    ``above`` of the loop that advanced; the first transition loads the whole tile), when every
    tile is full: the tile moves by that loop's stride and the inner loops above c reset."""
    ext = {d: math.prod(l.bound for l in loops if l.dim == d and arch.inside(c, l.level, l.axis))
           for d in op.dim_names}
    axes = [(tuple(cf for _, cf in ix.terms), tuple(d for d, _ in ix.terms)) for ix in X.indices]
    full = math.prod(axis_size(cf, tuple(ext[d] for d in ds)) for cf, ds in axes)
    table = np.zeros(max(len(above), 1), dtype=np.int64)
    for k in np.unique(classes[1:]).tolist():
        shift = {d: 0 for d in op.dim_names}
        shift[loops[above[k]].dim] += strides[above[k]]
        for i in above[k + 1:]:
            if loops[i].level < c:
                shift[loops[i].dim] -= (loops[i].bound - 1) * strides[i]
        ov = 1
        for cf, ds in axes:
            e = tuple(ext[d] for d in ds)
            ov *= axis_overlap(cf, e, e, tuple(shift[d] for d in ds))
        table[k] = full - ov
    delta = table[classes].astype(np.float64)
    delta[0] = full
    return delta


def _edge_deltas(op: Operator, arch: Accelerator, X, loops: list, strides: list[int], above: list[int], c: int,
                 steps: np.ndarray, digits: np.ndarray) -> np.ndarray:
    """Elements of X that enter level c at each of its transitions (``steps``), edge tiles
    included: exact deltas of the first instance's tiles, once per distinct situation."""
    lo = {}
    n = {}
    for d in op.dim_names:
        E = math.prod(l.bound for l in loops if l.dim == d and arch.inside(c, l.level, l.axis))
        base = np.zeros(len(steps), dtype=np.int64)
        for k, i in enumerate(above):
            if loops[i].dim == d and loops[i].level < c:
                base += digits[steps, k] * strides[i]
        lo[d] = base
        n[d] = np.minimum(E, op.sizes[d] - base)
    ne = np.ones(len(steps), dtype=bool)
    for d in op.dim_names:
        ne &= n[d] > 0
    xd = [d for d in op.dim_names if d in X.dims]
    axes = [(tuple(cf for _, cf in ix.terms), [xd.index(d) for d, _ in ix.terms]) for ix in X.indices]
    rows = np.column_stack([lo[d] for d in xd] + [n[d] for d in xd] + [ne.astype(np.int64)]) \
        if xd else ne.astype(np.int64)[:, None]
    prev = np.vstack([np.zeros((1, rows.shape[1]), dtype=np.int64), rows[:-1]])
    key = np.hstack([rows[:, len(xd):], rows[:, :len(xd)] - prev[:, :len(xd)], prev[:, len(xd):]])
    uniq, inv = _unique_rows(key)
    nx = len(xd)
    delta_u = np.zeros(len(uniq), dtype=np.int64)
    for u, row in enumerate(uniq):
        n_new, ne_new = row[:nx], row[nx]
        shift, n_old, ne_old = row[nx + 1:2 * nx + 1], row[2 * nx + 1:3 * nx + 1], row[3 * nx + 1]
        if not ne_new:
            continue
        full = 1
        for coeffs, ids in axes:
            full *= axis_size(coeffs, tuple(int(n_new[j]) for j in ids))
        if not ne_old:
            delta_u[u] = full
            continue
        ov = 1
        for coeffs, ids in axes:
            ov *= axis_overlap(coeffs, tuple(int(n_old[j]) for j in ids), tuple(int(n_new[j]) for j in ids),
                               tuple(int(shift[j]) for j in ids))
        delta_u[u] = full - ov
    return delta_u[inv.reshape(-1)].astype(np.float64)


def _steps(op: Operator, arch: Accelerator, m: Mapping):
    """Transfer pairs, the innermost level L that receives tiles, the temporal loops above it and
    the number of tile steps (the product of their bounds)."""
    nlev = len(arch.levels)
    chains = {X.name: [i for i in range(nlev) if X.name in m.keep[i]] for X in op.operands}
    pairs = [(X, p, c) for X in op.operands for p, c in pairwise(chains[X.name])]
    L = max((c for _, _, c in pairs), default=None)
    above = [i for i, l in enumerate(m.loops) if not l.spatial and L is not None and l.level < L]
    return chains, pairs, L, above, math.prod(m.loops[i].bound for i in above)


def tile_steps(op: Operator, arch: Accelerator, m: Mapping) -> int:
    """Steps the simulator walks (its time and memory grow with them): a caller can refuse first."""
    return _steps(op, arch, m)[4]


def build_program(op: Operator, arch: Accelerator, m: Mapping, counts=None) -> TileProgram:
    counts = counts if counts is not None else access_counts(op, arch, m)
    loops = list(m.loops)
    strides = loop_strides(m)
    chains, pairs, L, above, n_steps = _steps(op, arch, m)
    bounds = [loops[i].bound for i in above]
    inner = math.prod(l.bound for i, l in enumerate(loops) if not l.spatial and i not in above)
    mac_cycles = math.ceil(inner / arch.compute.macs_per_cycle)
    pipe = pipeline_overhead(op, arch, m) / n_steps

    # the outermost loop above L that advances at every step: the innermost nonzero digit of the
    # step number in mixed radix over those loops (outermost first)
    first_change = np.zeros(n_steps, dtype=np.int64)
    if n_steps > 1 and above:
        s_ = np.arange(n_steps, dtype=np.int64)
        first_change[1:] = len(above) - 1
        suffix = 1
        for t in range(1, len(above)):
            suffix *= bounds[len(above) - t]
            first_change[s_ % suffix == 0] = len(above) - 1 - t
        first_change[0] = 0
    digits = None
    # a perfect mapping has full tiles only: a transition's delta depends only on the loop that
    # advanced, so it is computed once per loop instead of once per step
    perfect = all(math.prod(l.bound for l in loops if l.dim == d) == op.sizes[d] for d in op.dim_names)

    bits = {X.name: X.bits for X in op.operands}
    # the output's updates and drains in bits per level: finished outputs may move at fewer bits
    one = {k: [np.array([v], dtype=np.int64) for v in c.as_tuple()] for k, c in counts.items()}
    nest = NestRows.of_mapping(op, arch, m)
    out_bits = {i: (float(u[0]), float(d[0])) for i, (u, d) in output_bits(nest, m.keep, one).items()}
    shapes: dict[tuple[int, str], np.ndarray] = {}     # (level, operand) -> share of each tile's load
    prog = TileProgram(op, arch, m, n_steps, L, mac_cycles, pipe, {})
    for X, p, c in pairs:
        # c starts a new tile where a temporal loop above c advanced (or at the start)
        is_above_c = np.array([loops[i].level < c for i in above], dtype=bool)
        trans = np.zeros(n_steps, dtype=bool)
        trans[0] = True
        if len(above):
            trans[1:] = is_above_c[first_change[1:]]
        steps = np.nonzero(trans)[0]
        if perfect:
            delta = _perfect_deltas(op, arch, X, loops, strides, above, c, first_change[steps])
        else:
            if digits is None:
                digits = _digits(n_steps, bounds)
            delta = _edge_deltas(op, arch, X, loops, strides, above, c, steps, digits)
        # the first tile at the first step is complete even if key rows coincide
        total = float(delta.sum())
        cc, pc = counts[(c, X.name)], counts[(p, X.name)]
        # traffic per instance the mapping uses: idle instances of a fan-out do not share the work
        n_c, n_p = used_instances(arch, m, c), used_instances(arch, m, p)
        inst_c = n_c
        load_c, load_p = cc.fills, pc.reads
        if X.is_output:
            store_c = cc.drains
            store_c_bits, store_p_bits = out_bits[c][1], out_bits[p][0]
        else:
            store_c, store_c_bits, store_p_bits = 0, 0.0, 0.0
        # a transition that moves nothing keeps the same buffer: it is no new tile
        moved = delta > 0
        moved[0] = True
        steps, delta = steps[moved], delta[moved]
        shape = delta / total if total else delta
        shapes[(c, X.name)] = shape
        b = bits[X.name]
        # an output tile is drained when the next tile of the level starts (or at the end)
        ts = TransferStream(c, p, X.name, X.is_output, steps,
                            shape * load_c * b / n_c, shape * load_p * b / n_p,
                            shape * store_c_bits / n_c, shape * store_p_bits / n_p,
                            scale=(store_c if X.is_output else load_c) / (total * inst_c) if total else 1.0)
        prog.transfers.append(ts)

    # A streamed tile moves in pieces at the tiles of its driver (the first level below in the
    # operand's chain that does not stream), each the driver's share of the whole tile.
    for ts in prog.transfers:
        X = op.operand(ts.operand)
        if X.is_output:
            continue
        if not streamed_tile(nest, m.keep, X, ts.level)[0][0]:
            continue
        chain = chains[X.name]
        d = chain[chain.index(ts.level) + 1]
        while streamed_tile(nest, m.keep, X, d)[0][0]:
            d = chain[chain.index(d) + 1]
        drv = next(t for t in prog.transfers if t.level == d and t.operand == X.name)
        share = shapes[(d, X.name)]
        ts.step = drv.step
        ts.load_bits, ts.load_parent_bits = ts.load_bits.sum() * share, ts.load_parent_bits.sum() * share
        ts.store_bits = ts.store_parent_bits = np.zeros(len(share))
        ts.streamed = True
    # A streamed drain leaves in equal pieces, one after each drain of its driver that leaves
    # finished outputs (every loop above the driver that does not index the output at its last
    # position): the piece goes when the driver's next tile starts, after the driver's drain.
    for ts in prog.transfers:
        X = op.operand(ts.operand)
        if not X.is_output or not streamed_drain(nest, m.keep, ts.level)[0][0]:
            continue
        chain = chains[X.name]
        d = chain[chain.index(ts.level) + 1]
        while streamed_drain(nest, m.keep, d)[0][0]:
            d = chain[chain.index(d) + 1]
        drv = next(t for t in prog.transfers if t.level == d and t.operand == X.name)
        if digits is None:
            digits = _digits(n_steps, bounds)
        final = np.ones(len(drv.step), dtype=bool)
        last_step = np.r_[drv.step[1:], n_steps] - 1          # a driver tile's outputs as it leaves
        for k, i in enumerate(above):
            if loops[i].level < d and loops[i].dim not in X.dims and loops[i].bound > 1:
                final &= digits[last_step, k] == loops[i].bound - 1
        piece = final / max(int(final.sum()), 1)
        ts.step = drv.step
        ts.load_bits, ts.load_parent_bits = (np.r_[v.sum(), np.zeros(len(piece) - 1)]
                                             for v in (ts.load_bits, ts.load_parent_bits))
        ts.store_bits, ts.store_parent_bits = ts.store_bits.sum() * piece, ts.store_parent_bits.sum() * piece
        ts.streamed = True

    # compute-side traffic: reads and updates at the last level of every operand, spread over steps
    for X in op.operands:
        last = chains[X.name][-1]
        cnt = counts[(last, X.name)]
        n_i = used_instances(arch, m, last)
        rd, wr = prog.stream_bits.get(last, (0.0, 0.0))
        rd += cnt.reads * X.bits / n_i / n_steps
        if X.is_output:
            wr += out_bits[last][0] / n_i / n_steps
        prog.stream_bits[last] = (rd, wr)
    return prog
