"""Embedding an intrinsic into an operator's dataflow as a constraint satisfaction problem (seed 000, sec. 4.3).

Variables are the intrinsic's dataflow nodes (output elements, multiply and
accumulate instances, input elements); a value is a point of the operator's
instance set or tensor box. The search assigns output variables first (the
thesis' robust order), then the accumulation chain of the first output
element; every other variable follows by propagation along dependence edges:

* edge constraints: an accumulate instance writes the output element its
  variable's value selects (access relation), multiplies feed accumulates of
  the same instance (RAW), the chain stays on one output element and varies
  the reduction (eq. 4.10), parallel instances repeat the same reduction for
  other output elements (spatial star edges);
* AllDiff over operation and output variables (and over input variables in
  the modes that forbid duplicated data);
* the axis-aligned hyper-rectangle (Alg. 4.4) over every operand group, with
  strides and row jumps, in tensor space or in access space (one axis per
  affine term, which admits im2col);
* zero padding of a dimension smaller than the intrinsic piece mapped on it,
  up to the domain bound B (eq. 4.39);
* memory-access overlap (Def. 4.5/4.6): consecutive output elements, and the
  first against every other, must overlap in each input operand as the
  intrinsic's own access sets do (derived from the intrinsic's dataflow, not
  the printed VTA equations, which look index-swapped).

Value generation follows Alg. 4.4: at the start of a row a variable may
continue the current move or jump to a new axis; inside a row the hyper-
rectangle fixes the value. Every candidate value tried counts as one
expanded node. Coordinates are Python integers throughout.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from accelmap.embed.dataflow import Dataflow, dataflow, overlap_kind
from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class Piece:
    """One operator dimension covered by part of an intrinsic axis: ``length`` points ``step`` apart."""

    dim: str
    length: int
    step: int

    def __str__(self) -> str:
        return f"{self.dim}:{self.length}" + (f"/{self.step}" if self.step != 1 else "")


@dataclass(frozen=True)
class Solution:
    roles: tuple[tuple[str, str], ...]                 # intrinsic operand -> operator operand
    axes: tuple[tuple[str, tuple[Piece, ...]], ...]    # intrinsic dim -> pieces, innermost first
    search: str                                        # which search found it ('memory' / 'duplicating')

    def key(self) -> tuple:
        return (self.roles, self.axes)

    def pieces(self, axis: str) -> tuple[Piece, ...]:
        return dict(self.axes)[axis]

    def __str__(self) -> str:
        roles = ", ".join(f"{a}={o}" for a, o in self.roles)
        axes = "; ".join(f"{a}->" + ("x".join(str(p) for p in ps) or "-") for a, ps in self.axes)
        return f"[{roles}] {axes}"


@dataclass(frozen=True)
class Options:
    memory: bool = True            # memory-access overlap constraints
    rect_space: str = "tensor"     # 'tensor' or 'access'
    alldiff_inputs: bool = True    # forbid two intrinsic input elements on one tensor element
    single_term: bool = False      # strict: a mapped dim must be the only term of its tensor axes
    max_stride: int = 1
    max_fuse: int = 1              # operator dims per intrinsic axis
    pad: bool = True
    bound: int = 16                # domain bound B
    swap_roles: bool = False       # also try the inputs the other way round
    label: str = "memory"


@dataclass
class SearchStats:
    expanded: int = 0
    solutions: int = 0
    seconds: float = 0.0
    timed_out: bool = False
    assets: int = 0


class _Deadline(Exception):
    pass


@dataclass
class _Problem:
    op: Operator
    intr: Operator
    odf: Dataflow
    idf: Dataflow
    roles: dict[str, str]
    opts: Options
    order: tuple[str, ...]                  # asset: dimension order for value selection
    deadline: float
    limit: int
    stats: SearchStats
    found: list = field(default_factory=list)
    per_output: int = 2                    # reduction placements kept per output placement (diversity)
    strided: frozenset = frozenset()       # dims where a stride > 1 can pay off (image/dilate pack)
    seen: set = field(default_factory=set)
    verdicts: dict = field(default_factory=dict)   # candidate key -> passes verify (shared per operator)

    # ---- static facts ----------------------------------------------------
    def axis_operands(self, axis: str) -> list[str]:
        """Intrinsic operands indexed by an intrinsic dimension."""
        return [o.name for o in self.intr.operands if axis in o.dims]


def _tensor_axis(op: Operator, operand: str, dim: str) -> int | None:
    for k, ix in enumerate(op.operand(operand).indices):
        if dim in ix.dims:
            return k
    return None


def _piece_ok(p: _Problem, axis: str, dim: str, step: int, pieces: dict[str, list[Piece]]) -> bool:
    """Edge, AllDiff, hyper-rectangle and memory consequences of opening a piece (dim, step) on ``axis``."""
    op, opts = p.op, p.opts
    for io in p.intr.operands:
        t = p.roles[io.name]
        idx = _tensor_axis(op, t, dim)
        if axis in io.dims:
            if idx is None:
                # AllDiff: elements of the intrinsic operand along this axis would be one tensor element.
                if io.is_output or opts.alldiff_inputs:
                    return False
                continue
            terms = op.operand(t).indices[idx].terms
            if opts.single_term and len(terms) > 1:
                return False
            if opts.rect_space == "tensor":
                # Hyper-rectangle in tensor space: one move direction per tensor axis.
                for a2, ps in pieces.items():
                    if a2 in io.dims:
                        for q in ps:
                            if _tensor_axis(op, t, q.dim) == idx:
                                return False
        elif idx is not None:
            # Edge constraint: the intrinsic shares this operand along ``axis``, so the operator must too.
            return False
    if opts.memory and axis in p.idf.output_dims:
        o_out = tuple(0 for _ in p.odf.output_dims)
        o_next = tuple(step if d == dim else 0 for d in p.odf.output_dims)
        i_out = tuple(0 for _ in p.idf.output_dims)
        i_next = tuple(1 if d == axis else 0 for d in p.idf.output_dims)
        for io in p.intr.inputs:
            want = overlap_kind(p.idf, io.name, i_out, i_next)
            if overlap_kind(p.odf, p.roles[io.name], o_out, o_next) != want:
                return False
    return True


def _in_domain(p: _Problem, dim: str, value: int, step: int) -> bool:
    size = p.op.sizes[dim]
    if value < size:
        return True
    return p.opts.pad and value < p.opts.bound * step


def _line(p: _Problem, axis: str, L: int, cand_dims: list[str], pieces: dict[str, list[Piece]], used: set[str]):
    """Assign the variables along one intrinsic axis; yields the closed pieces of every consistent choice."""
    if L == 1:
        yield []
        return
    steps = range(1, p.opts.max_stride + 1)

    def rec(closed: list[Piece], open_dim: str | None, open_step: int, count: int):
        inner = math.prod(q.length for q in closed)
        if open_dim is not None and inner * count == L:
            yield closed + [Piece(open_dim, count, open_step)]
            return
        if time.monotonic() > p.deadline:
            raise _Deadline
        if open_dim is not None:
            # The next variable starts a row: continue the current move ...
            p.stats.expanded += 1
            if inner * (count + 1) <= L and _in_domain(p, open_dim, count * open_step, open_step):
                yield from rec(closed, open_dim, open_step, count + 1)
            # ... or close the row and jump to a fresh axis (eq. 4.19/4.20).
            if L % (inner * count) or len(closed) + 2 > p.opts.max_fuse:
                return
            new_closed = closed + [Piece(open_dim, count, open_step)]
        else:
            new_closed = closed
        taken = used | {q.dim for q in new_closed}
        if any(q.step * (q.length - 1) >= p.op.sizes[q.dim] and q.length > 2 * p.op.sizes[q.dim]
               for q in new_closed):
            return  # an inner piece may pad its dimension up to the next power of two, no further
        for d in cand_dims:
            if d in taken:
                continue
            # Strides pay off on output dims (image pack); on a reduction they only reorder the sum.
            for t in (steps if d in p.strided else (1,)):
                p.stats.expanded += 1
                if not _in_domain(p, d, t, t):
                    continue
                trial = dict(pieces)
                trial[axis] = list(new_closed)
                if not _piece_ok(p, axis, d, t, trial):
                    continue
                yield from rec(new_closed, d, t, 2)

    yield from rec([], None, 1, 1)


def _search(p: _Problem) -> None:
    intr_axes = [d for d, _ in p.intr.dims]
    out_axes = list(reversed(p.idf.output_dims))          # innermost output axis first
    red_axes = [d for d in intr_axes if d not in p.idf.output_dims]
    order = out_axes + red_axes
    out_dims = [d for d in p.order if d in p.odf.output_dims]
    red_dims = [d for d in p.order if d in p.odf.reduction_dims]

    n_out = len(out_axes)
    per_output = [0]

    def rec(k: int, pieces: dict[str, list[Piece]], used: set[str]):
        if len(p.found) >= p.limit:
            return
        if k == n_out:
            per_output[0] = 0          # a fresh output placement
        elif k > n_out and per_output[0] >= p.per_output:
            return
        if k == len(order):
            sol = Solution(tuple(sorted(p.roles.items())),
                           tuple((a, tuple(pieces[a])) for a in intr_axes), p.opts.label)
            if sol.key() not in p.seen and _verify_cached(p, sol):
                p.seen.add(sol.key())
                p.found.append(sol)
                p.stats.solutions += 1
                per_output[0] += 1
            return
        axis = order[k]
        L = p.intr.sizes[axis]
        cands = out_dims if axis in p.idf.output_dims else red_dims
        for closed in _line(p, axis, L, cands, pieces, used):
            nxt = dict(pieces)
            nxt[axis] = closed
            rec(k + 1, nxt, used | {q.dim for q in closed})
            if len(p.found) >= p.limit:
                return

    rec(0, {}, set())


# ---- point-level verification of a complete assignment --------------------

def assignment(op: Operator, intr: Operator, sol: Solution) -> tuple[np.ndarray, np.ndarray]:
    """Value of every intrinsic instance variable, as two aligned integer arrays.

    Row ``i`` of the first array is an intrinsic point (rows in ``itertools.product``
    order over the intrinsic dims); row ``i`` of the second is the operator loop point
    (columns in ``op.dim_names`` order) that variable takes. The dtype is int64 when
    every coordinate and every access index provably fits, else Python integers.
    """
    axes = dict(sol.axes)
    sizes = [s for _, s in intr.dims]
    col = {d: k for k, d in enumerate(op.dim_names)}
    hi = {d: 0 for d in op.dim_names}
    for ps in axes.values():
        for pc in ps:
            hi[pc.dim] += (pc.length - 1) * pc.step
    reach = max([sum(abs(c) * hi[d] for d, c in ix.terms) for o in op.operands for ix in o.indices]
                + list(hi.values()) + sizes)
    dtype = np.int64 if reach < 2 ** 62 else object
    ipts = np.indices(sizes, dtype=np.int64).reshape(len(sizes), -1).T
    val = np.zeros((len(ipts), len(col)), dtype=dtype)
    for k, (a, _) in enumerate(intr.dims):
        rem = ipts[:, k].astype(dtype)
        for pc in axes[a]:
            val[:, col[pc.dim]] += (rem % pc.length) * pc.step
            rem = rem // pc.length
    return ipts, val


def is_hyper_rectangle(points: list[tuple[int, ...]]) -> bool:
    """Alg. 4.4: do the ordered points walk an axis-aligned (strided) hyper-rectangle row by row?

    The first move fixes the innermost axis and its stride; the row ends where
    the walk leaves that axis, and the jump back to the row start plus one step
    on a fresh axis (eq. 4.19/4.20) opens the next dimension. Sizes must
    multiply to the number of points.
    """
    M = len(points)
    if M <= 1:
        return True
    v0 = points[0]
    n = len(v0)
    dims: list[tuple[int, int, int]] = []
    block = 1
    while block < M:
        diag = [b - a for a, b in zip(v0, points[block])]
        nz = [i for i in range(n) if diag[i]]
        if len(nz) != 1 or nz[0] in {a for a, _, _ in dims}:
            return False
        ax, st = nz[0], diag[nz[0]]
        size = 1
        while size * block < M and points[size * block] == tuple(
                v0[i] + (size * st if i == ax else 0) for i in range(n)):
            size += 1
        if M % (size * block):
            return False
        dims.append((ax, st, size))
        block *= size
    for k, pt in enumerate(points):
        exp = list(v0)
        rem = k
        for ax, st, size in dims:
            exp[ax] += (rem % size) * st
            rem //= size
        if tuple(exp) != pt:
            return False
    return True


def _rows(a: np.ndarray) -> list[tuple]:
    return [tuple(r) for r in a.tolist()]


def _operand_matrix(op: Operator, operand: str, val: np.ndarray, access_space: bool) -> np.ndarray:
    """Per instance: the tensor element it touches, or its access-space point (one column per affine term)."""
    col = {d: k for k, d in enumerate(op.dim_names)}
    cols = []
    for ix in op.operand(operand).indices:
        terms = [c * val[:, col[d]] for d, c in ix.terms]
        if access_space:
            cols.extend(terms)
        else:
            cols.append(sum(terms[1:], terms[0]) if terms else np.zeros(len(val), dtype=val.dtype))
    return np.stack(cols, axis=1) if cols else np.zeros((len(val), 0), dtype=val.dtype)


def verify(op: Operator, intr: Operator, sol: Solution, opts: Options,
           odf: Dataflow | None = None, idf: Dataflow | None = None) -> str | None:
    """Check every constraint on the full assignment; None when it holds, else the violated one.

    Array form of the point-by-point check: every intrinsic instance variable is a row.
    """
    roles = dict(sol.roles)
    ipts, val = assignment(op, intr, sol)
    pos = {d: k for k, (d, _) in enumerate(intr.dims)}
    isizes = [s for _, s in intr.dims]
    if len(set(_rows(val))) != len(val):
        return "AllDiff over multiply/accumulate instances"
    steps = {pc.dim: pc.step for _, ps in sol.axes for pc in ps}
    for k, d in enumerate(op.dim_names):
        x = int(val[:, k].max())
        # Out of domain is monotone in the value, so the column maximum decides.
        if x >= op.sizes[d] and not (opts.pad and x < opts.bound * steps.get(d, 1)):
            return f"domain of {d}"
    for io in intr.operands:
        t = roles[io.name]
        kpos = [pos[ix.dims[0]] for ix in io.indices]
        # Rows are in product order, so the first row of each key is its first instance and
        # ascending key ids are the keys in sorted order.
        key = np.ravel_multi_index(tuple(ipts[:, k] for k in kpos), tuple(isizes[k] for k in kpos)) \
            if kpos else np.zeros(len(ipts), dtype=np.int64)
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        elem = _operand_matrix(op, t, val, False)
        if not (elem == elem[first][inverse]).all():
            return f"edge constraint: an element of {io.name} maps to several elements of {t}"
        elems = _rows(elem[first])
        if (io.is_output or opts.alldiff_inputs) and len(set(elems)) != len(elems):
            return f"AllDiff over {io.name}"
        lead = _rows(_operand_matrix(op, t, val[first], True)) if opts.rect_space == "access" else elems
        pts = list(dict.fromkeys(lead))   # a broadcast repeats elements
        if not is_hyper_rectangle(pts):
            return f"hyper-rectangle over {io.name}"
    if opts.memory and odf is not None and idf is not None:
        opos = [pos[x] for x in idf.output_dims]
        ocol = [op.dim_names.index(d) for d in odf.output_dims]
        out_of = {}
        for ipt, v in zip(_rows(ipts[:, opos]), _rows(val[:, ocol])):
            out_of.setdefault(ipt, v)
        outs = sorted(out_of)
        lines = [e for e in outs if sum(1 for x in e if x) <= 1]
        pairs = [(outs[i - 1], outs[i]) for i in range(1, len(outs))] + [(outs[0], e) for e in lines[1:]]
        for e0, e1 in pairs:
            for io in intr.inputs:
                want = overlap_kind(idf, io.name, e0, e1)
                if overlap_kind(odf, roles[io.name], out_of[e0], out_of[e1]) != want:
                    return f"memory access overlap of {io.name}"
    return None


@lru_cache(maxsize=64)
def _cached_dataflow(op: Operator, pad_to: tuple) -> Dataflow:
    return dataflow(op, dict(pad_to) or None)


# A worker process runs many assets of one operator; they meet the same candidates.
# Keyed first by (operator, intrinsic, options), looked up once per asset, so the
# per-candidate lookup hashes only the candidate.
_VERIFIED: dict = {}


def _verdicts(op: Operator, intr: Operator, opts: Options) -> dict:
    if sum(len(v) for v in _VERIFIED.values()) > 100_000:
        _VERIFIED.clear()
    return _VERIFIED.setdefault((op, intr, opts), {})


def _verify_cached(p: _Problem, sol: Solution) -> bool:
    key = sol.key()
    verdicts = p.verdicts
    if key not in verdicts:
        verdicts[key] = verify(p.op, p.intr, sol, p.opts, p.odf, p.idf) is None
    return verdicts[key]


def run_asset(args) -> tuple[list[Solution], SearchStats]:
    op, intr, roles, opts, order, time_limit, limit = args
    stats = SearchStats(assets=1)
    pad_to = tuple((d, opts.bound * opts.max_stride) for d in op.dim_names) if opts.pad else ()
    p = _Problem(op, intr, _cached_dataflow(op, pad_to), _cached_dataflow(intr, ()), dict(roles), opts,
                 order, time.monotonic() + time_limit, limit, stats)
    # A stride only helps on an output dim that slides over an input axis (stencil or strided access).
    p.strided = frozenset(d for d in p.odf.output_dims for o in op.inputs for ix in o.indices
                          if d in ix.dims and (len(ix.terms) > 1 or ix.coeff(d) > 1))
    p.verdicts = _verdicts(op, intr, opts)
    t0 = time.monotonic()
    try:
        _search(p)
    except _Deadline:
        stats.timed_out = True
    stats.seconds = time.monotonic() - t0
    return p.found, stats
