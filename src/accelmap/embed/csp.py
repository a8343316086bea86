"""Embedding an intrinsic into an operator's dataflow as a constraint satisfaction problem
(Rieber's 2022 dissertation, sec. 4.3).

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
expanded node. Coordinates are exact: Python integers in the search, and in
the array check of a complete assignment int64 only where a bound proves it
cannot overflow (else Python integers again).
"""

from __future__ import annotations

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

    static: dict = field(default_factory=dict)     # (axis, dim, step) -> piece-local constraints hold
    taxis: dict = field(default_factory=dict)      # (operand, dim) -> tensor axis the dim indexes, or None

    def tensor_axis(self, operand: str, dim: str) -> int | None:
        key = (operand, dim)
        if key not in self.taxis:
            self.taxis[key] = tensor_axis_of(self.op, operand, dim)
        return self.taxis[key]


def tensor_axis_of(op: Operator, operand: str, dim: str) -> int | None:
    """The first tensor axis of ``operand`` whose index uses ``dim``, or None."""
    for k, ix in enumerate(op.operand(operand).indices):
        if dim in ix.dims:
            return k
    return None


def _static_ok(p: _Problem, axis: str, dim: str, step: int) -> bool:
    """Edge, AllDiff and memory consequences of a piece (dim, step) on ``axis``: they do not
    depend on the other pieces, so each problem decides them once."""
    key = (axis, dim, step)
    if key in p.static:
        return p.static[key]
    ok = True
    for io in p.intr.operands:
        t = p.roles[io.name]
        idx = p.tensor_axis(t, dim)
        if axis in io.dims:
            if idx is None:
                # AllDiff: elements of the intrinsic operand along this axis would be one tensor element.
                if io.is_output or p.opts.alldiff_inputs:
                    ok = False
                continue
            if p.opts.single_term and len(p.op.operand(t).indices[idx].terms) > 1:
                ok = False
        elif idx is not None:
            # Edge constraint: the intrinsic shares this operand along ``axis``, so the operator must too.
            ok = False
    if ok and p.opts.memory and axis in p.idf.output_dims:
        o_out = tuple(0 for _ in p.odf.output_dims)
        o_next = tuple(step if d == dim else 0 for d in p.odf.output_dims)
        i_out = tuple(0 for _ in p.idf.output_dims)
        i_next = tuple(1 if d == axis else 0 for d in p.idf.output_dims)
        for io in p.intr.inputs:
            want = overlap_kind(p.idf, io.name, i_out, i_next)
            if overlap_kind(p.odf, p.roles[io.name], o_out, o_next) != want:
                ok = False
    p.static[key] = ok
    return ok


def _rect_ok(p: _Problem, axis: str, dim: str, pieces: dict[str, list[Piece]], closed: list[Piece]) -> bool:
    """Hyper-rectangle in tensor space: one move direction per tensor axis of every operand ``axis`` walks."""
    if p.opts.rect_space != "tensor":
        return True
    for io in p.intr.operands:
        if axis not in io.dims:
            continue
        t = p.roles[io.name]
        idx = p.tensor_axis(t, dim)
        if idx is None:
            continue
        for a2 in io.dims:
            ps = closed if a2 == axis else pieces.get(a2, ())
            for q in ps:
                if p.tensor_axis(t, q.dim) == idx:
                    return False
    return True


def _piece_ok(p: _Problem, axis: str, dim: str, step: int, pieces: dict[str, list[Piece]],
              closed: list[Piece]) -> bool:
    """Consequences of opening a piece (dim, step) on ``axis`` next to the ``closed`` ones of that axis."""
    return _static_ok(p, axis, dim, step) and _rect_ok(p, axis, dim, pieces, closed)


def _in_domain(p: _Problem, dim: str, value: int, step: int) -> bool:
    size = p.op.sizes[dim]
    if value < size:
        return True
    return p.opts.pad and value < p.opts.bound * step


def _line(p: _Problem, axis: str, L: int, cand_dims: list[str], pieces: dict[str, list[Piece]], used: set[str]):
    """Assign the variables along one intrinsic axis; yields the closed pieces of every consistent choice.

    Depth first: from an open move, first every choice that continues it further, then (longest
    move first) every choice that closes the row after ``count`` points and jumps to a fresh axis.
    """
    if L == 1:
        yield []
        return
    steps = range(1, p.opts.max_stride + 1)

    def jumps(closed: list[Piece], inner: int):
        """Open a move on a fresh dim after the ``closed`` pieces (eq. 4.19/4.20)."""
        taken = used | {q.dim for q in closed}
        if any(q.step * (q.length - 1) >= p.op.sizes[q.dim] and q.length > 2 * p.op.sizes[q.dim]
               for q in closed):
            return  # an inner piece may pad its dimension up to the next power of two, no further
        for d in cand_dims:
            if d in taken:
                continue
            # Strides pay off on output dims (image pack); on a reduction they only reorder the sum.
            for t in (steps if d in p.strided else (1,)):
                p.stats.expanded += 1
                if not _in_domain(p, d, t, t):
                    continue
                if not _piece_ok(p, axis, d, t, pieces, closed):
                    continue
                yield from moves(closed, inner, d, t)

    def moves(closed: list[Piece], inner: int, dim: str, step: int):
        """Every choice once ``dim`` is open with its first two points placed."""
        # Each further row-start variable either continues the move or closes the row; walk the
        # continuations first (they come first depth-first), then close from the longest down.
        count, chain = 2, []
        while inner * count != L:
            if time.monotonic() > p.deadline:
                raise _Deadline
            p.stats.expanded += 1
            chain.append(count)
            if inner * (count + 1) <= L and _in_domain(p, dim, count * step, step):
                count += 1
            else:
                break
        else:
            yield closed + [Piece(dim, count, step)]
        for count in reversed(chain):
            if L % (inner * count) or len(closed) + 2 > p.opts.max_fuse:
                continue
            yield from jumps(closed + [Piece(dim, count, step)], inner * count)

    if time.monotonic() > p.deadline:
        raise _Deadline
    yield from jumps([], 1)


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

# Facts derived from one operator or intrinsic (index matrices, row groupings), computed once.
# Keyed by identity, since hashing an operator walks all of it; the entry keeps the object
# alive, so its id cannot be reused while the entry exists.
_FACTS: dict[int, tuple[object, dict]] = {}


def _facts(obj: object) -> dict:
    entry = _FACTS.get(id(obj))
    if entry is None or entry[0] is not obj:
        if len(_FACTS) > 256:
            _FACTS.clear()
        entry = _FACTS[id(obj)] = (obj, {})
    return entry[1]


def _instance_points(intr: Operator) -> np.ndarray:
    f = _facts(intr)
    if "points" not in f:
        sizes = [s for _, s in intr.dims]
        f["points"] = np.indices(sizes, dtype=np.int64).reshape(len(sizes), -1).T
    return f["points"]


def _index_matrix(op: Operator, operand: str, access_space: bool, dtype) -> np.ndarray:
    """``val @ M`` gives, per loop point, the tensor element of ``operand`` (or its access-space
    point, one column per affine term)."""
    f = _facts(op)
    key = ("index", operand, access_space, dtype)
    if key not in f:
        col = {d: k for k, d in enumerate(op.dim_names)}
        cols: list[dict[str, int]] = []
        for ix in op.operand(operand).indices:
            if access_space:
                cols.extend({d: c} for d, c in ix.terms)
            else:
                cols.append(dict(ix.terms))
        m = np.zeros((len(col), len(cols)), dtype=np.int64)
        for j, terms in enumerate(cols):
            for d, c in terms.items():
                m[col[d], j] = c
        f[key] = m.astype(dtype)
    return f[key]


def _key_groups(intr: Operator, operand: str) -> tuple[np.ndarray, np.ndarray]:
    """Instances grouped by the element of an intrinsic operand they touch: the first instance
    of every element (elements in sorted index order) and each instance's element number."""
    f = _facts(intr)
    key = ("groups", operand)
    if key not in f:
        ipts = _instance_points(intr)
        pos = {d: k for k, (d, _) in enumerate(intr.dims)}
        kpos = [pos[ix.dims[0]] for ix in intr.operand(operand).indices]
        sizes = [s for _, s in intr.dims]
        # Rows are in product order, so the first row of each element is its first instance,
        # and raveled indices ascend with the sorted element indices.
        ids = np.ravel_multi_index(tuple(ipts[:, k] for k in kpos), tuple(sizes[k] for k in kpos)) \
            if kpos else np.zeros(len(ipts), dtype=np.int64)
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        f[key] = (first, inverse.reshape(-1))
    return f[key]


def _output_rows(intr: Operator, output_dims: tuple[str, ...]) -> tuple[np.ndarray, list[tuple]]:
    """First instance of every intrinsic output element, with its output coordinates, sorted."""
    f = _facts(intr)
    key = ("outputs", output_dims)
    if key not in f:
        ipts = _instance_points(intr)
        pos = {d: k for k, (d, _) in enumerate(intr.dims)}
        opos = [pos[x] for x in output_dims]
        # In product order an element's first instance has every other intrinsic coordinate 0.
        rest = [k for k in range(len(pos)) if k not in opos]
        rows = np.flatnonzero((ipts[:, rest] == 0).all(axis=1))
        keys = _rows(ipts[rows][:, opos])
        order = sorted(range(len(rows)), key=keys.__getitem__)
        f[key] = (rows[order], [keys[i] for i in order])
    return f[key]


def assignment(op: Operator, intr: Operator, sol: Solution) -> tuple[np.ndarray, np.ndarray]:
    """Value of every intrinsic instance variable, as two aligned integer arrays.

    Row ``i`` of the first array is an intrinsic point (rows in ``itertools.product``
    order over the intrinsic dims); row ``i`` of the second is the operator loop point
    (columns in ``op.dim_names`` order) that variable takes. The dtype is int64 when every
    coordinate, access index and hyper-rectangle walk over them provably fits, else Python
    integers (Rieber's dissertation lost layers to 32-bit overflow).
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
    ipts = _instance_points(intr)
    dtype = np.int64 if _fits_int64(reach, len(ipts)) else object
    val = np.zeros((len(ipts), len(col)), dtype=dtype)
    for k, (a, _) in enumerate(intr.dims):
        rem = ipts[:, k].astype(dtype)
        for pc in axes[a]:
            val[:, col[pc.dim]] += (rem % pc.length) * pc.step
            rem = rem // pc.length
    return ipts, val


def is_hyper_rectangle(points) -> bool:
    """Alg. 4.4: do the ordered points walk an axis-aligned (strided) hyper-rectangle row by row?

    The first move fixes the innermost axis and its stride; the row ends where
    the walk leaves that axis, and the jump back to the row start plus one step
    on a fresh axis (eq. 4.19/4.20) opens the next dimension. Sizes must
    multiply to the number of points. ``points``: a sequence of equal-length
    integer tuples, or a 2-D integer array (one point per row).
    """
    M = len(points)
    if M <= 1:
        return True
    pts = _exact(points if isinstance(points, np.ndarray) else np.array(points, dtype=object))
    v0 = pts[0]
    dims: list[tuple[int, object, int]] = []
    block = 1
    while block < M:
        diag = pts[block] - v0
        nz = np.flatnonzero(diag != 0)
        if len(nz) != 1 or int(nz[0]) in {a for a, _, _ in dims}:
            return False
        ax, st = int(nz[0]), diag[nz[0]]
        # The row goes on while the points at multiples of ``block`` step along ``ax``.
        idx = np.arange(block, M, block)
        exp = np.repeat(v0[None, :], len(idx), axis=0)
        exp[:, ax] += np.arange(1, len(idx) + 1).astype(pts.dtype) * st
        ok = (pts[idx] == exp).all(axis=1)
        size = 1 + (len(ok) if ok.all() else int(np.argmin(ok)))
        if M % (size * block):
            return False
        dims.append((ax, st, size))
        block *= size
    exp = np.repeat(v0[None, :], M, axis=0)
    k = np.arange(M).astype(pts.dtype)
    prefix = 1
    for ax, st, size in dims:
        exp[:, ax] += ((k // prefix) % size) * st
        prefix *= size
    return bool((exp == pts).all())


def _fits_int64(bound: int, count: int) -> bool:
    """Can int64 hold values of magnitude ``bound`` through a walk of ``count`` strided steps?"""
    return bound * (2 * count + 1) < 2 ** 62


def _exact(a: np.ndarray) -> np.ndarray:
    """``a`` as int64 when the hyper-rectangle walk cannot overflow it, else as Python integers."""
    big = max(abs(int(a.max())), abs(int(a.min()))) if a.size else 0
    want = np.int64 if _fits_int64(big, len(a)) else object
    return a if a.dtype == want else a.astype(want)


def _distinct(rows: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of every distinct row, in order of appearance."""
    if rows.dtype != object and rows.shape[1] and len(rows):
        lo = rows.min(axis=0)
        span = [int(x) + 1 for x in rows.max(axis=0) - lo]
        if math.prod(span) < 2 ** 62:
            # Mixed-radix code of each row: injective, so distinct codes are distinct rows.
            mult = np.array([math.prod(span[k + 1:]) for k in range(len(span))], dtype=np.int64)
            _, idx = np.unique((rows - lo) @ mult, return_index=True)
            return np.sort(idx)
    first: dict = {}
    for i, r in enumerate(map(tuple, rows.tolist())):
        first.setdefault(r, i)
    return np.fromiter(first.values(), dtype=np.int64, count=len(first))


def _rows(a: np.ndarray) -> list[tuple]:
    return [tuple(r) for r in a.tolist()]


def verify(op: Operator, intr: Operator, sol: Solution, opts: Options,
           odf: Dataflow | None = None, idf: Dataflow | None = None) -> str | None:
    """Check every constraint on the full assignment; None when it holds, else the violated one.

    Array form of the point-by-point check: every intrinsic instance variable is a row.
    """
    roles = dict(sol.roles)
    _, val = assignment(op, intr, sol)
    if len(_distinct(val)) != len(val):
        return "AllDiff over multiply/accumulate instances"
    steps = {pc.dim: pc.step for _, ps in sol.axes for pc in ps}
    # Out of domain is monotone in the value, so the column maximum decides.
    for d, x in zip(op.dim_names, val.max(axis=0).tolist(), strict=True):
        if x >= op.sizes[d] and not (opts.pad and x < opts.bound * steps.get(d, 1)):
            return f"domain of {d}"
    for io in intr.operands:
        t = roles[io.name]
        first, inverse = _key_groups(intr, io.name)
        elem = val @ _index_matrix(op, t, False, val.dtype)
        elems = elem[first]
        if not (elem == elems[inverse]).all():
            return f"edge constraint: an element of {io.name} maps to several elements of {t}"
        if (io.is_output or opts.alldiff_inputs) and len(_distinct(elems)) != len(elems):
            return f"AllDiff over {io.name}"
        lead = val[first] @ _index_matrix(op, t, True, val.dtype) if opts.rect_space == "access" else elems
        if not is_hyper_rectangle(lead[_distinct(lead)]):   # a broadcast repeats elements
            return f"hyper-rectangle over {io.name}"
    if opts.memory and odf is not None and idf is not None:
        rows, outs = _output_rows(intr, idf.output_dims)
        ocol = [op.dim_names.index(d) for d in odf.output_dims]
        out_of = dict(zip(outs, _rows(val[rows][:, ocol]), strict=True))
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
    """One portfolio asset. ``deadline`` is a ``time.monotonic()`` instant shared by every asset
    of one search (the clock is system-wide, so worker processes read the same one)."""
    op, intr, roles, opts, order, deadline, limit = args
    stats = SearchStats(assets=1)
    if time.monotonic() > deadline:
        return [], SearchStats(timed_out=True)      # not started: the search ran out of time before it
    pad_to = tuple((d, opts.bound * opts.max_stride) for d in op.dim_names) if opts.pad else ()
    p = _Problem(op, intr, _cached_dataflow(op, pad_to), _cached_dataflow(intr, ()), dict(roles), opts,
                 order, deadline, limit, stats)
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
