"""The geometry of a loop nest over rows: one structure, many bound vectors.

A structure is the nest with its loops' dimensions, levels and axes fixed
(outermost level first, temporal loops before spatial ones within a level, as
a valid mapping orders them); a row of ``B`` gives every loop's bound. A single
mapping is a structure with one row. Everything the counts and the latency
model need of the nest's shape is defined here once, over NumPy rows: tile
extents (clipped to the operator, so partial tiles are covered), instances in
use, the transition classes of the loops above a level and the elements that
enter a tile at each, and the edge tiles of imperfect factors.

Sliding-window axes are closed forms where the window is an interval (in steps
of the coefficients' gcd) or a progression of one term; an axis with holes
(stride larger than the dilated window and coprime with it) is counted
element by element with the exact bit-set form of ``workload.index_sets``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.access_counts import stored_points
from accelmap.workload.index_sets import axis_overlap as exact_overlap
from accelmap.workload.index_sets import axis_size as exact_size
from accelmap.workload.operator import Operand, Operator

Structure = list[tuple[str, int, str | None]]

# ``NestRows.of_mapping``'s last nest, by (id of the operator, id of the accelerator, loops).
_LAST_MAPPING_NEST: dict[tuple, NestRows] = {}


def _closed_size(coeffs, exts):
    """Size of {sum c*x} for one or two terms, or -1 where it has holes."""
    if len(coeffs) == 1:
        return exts[0]
    if len(coeffs) > 2:
        return np.full_like(exts[0], -1)
    (c1, c2), (e1, e2) = coeffs, exts
    g = math.gcd(c1, c2)
    a, b = c1 // g, c2 // g
    if a == 1 and b == 1:
        # Equal coefficients (a stride-1 window): one interval of e1 + e2 - 1 points whatever the extents (each
        # case below gives that for extents >= 1); the common axis of a convolution's input, sized by the
        # thousand, in one operation instead of eight.
        return e1 + e2 - 1
    size = np.full_like(e1, -1)
    # One term fixed: an arithmetic progression of the other.
    size = np.where(e2 == 1, e1, np.where(e1 == 1, e2, size))
    # Windows that touch or overlap: one interval (in steps of the gcd).
    if a == 1:
        size = np.where((e1 > 1) & (e2 > 1) & (b <= e1), b * (e2 - 1) + e1, size)
    if b == 1:
        size = np.where((e1 > 1) & (e2 > 1) & (a <= e2), a * (e1 - 1) + e2, size)
    return size


def axis_size(coeffs, exts) -> tuple[np.ndarray, np.ndarray | None]:
    """(size of the axis {sum c*x} per entry, mask of entries whose axis has holes, or None when
    none can: a single-term axis); holed entries are counted exactly, one by one."""
    if len(coeffs) == 1:            # the common case, kept cheap: the mapper sizes tiles by the thousand
        return exts[0], None
    size = np.asarray(_closed_size(coeffs, exts))
    holes = size < 0
    if holes.any():
        size = size.copy()
        for ix in zip(*np.nonzero(holes), strict=True):
            size[ix] = exact_size(coeffs, tuple(int(e[ix]) for e in exts))
    return size, holes


def axis_overlap(coeffs, exts, shifts, size, holes) -> np.ndarray:
    """|A ∩ (A + shift)| per entry, A the axis of extents ``exts`` (of size ``size``): an interval in
    gcd steps, a progression of one term, or (``holes``) counted exactly."""
    if len(coeffs) == 1:
        return np.maximum(0, exts[0] - np.abs(shifts[0]))
    shape = np.broadcast_shapes(*(np.shape(x) for x in (*exts, *shifts, size)))
    if len(coeffs) == 2 and coeffs[0] == coeffs[1] == 1:
        # A stride-1 window: always one interval (a progression of one term where the other extent is 1 is that
        # interval too), shifted by the sum of the shifts.
        out = np.maximum(0, size - np.abs(shifts[0] + shifts[1]))
        if out.shape != shape:
            out = np.broadcast_to(out, shape)
    elif len(coeffs) == 2:
        (c1, c2), (e1, e2) = coeffs, exts
        g = math.gcd(c1, c2)
        off = np.abs(c1 * shifts[0] + c2 * shifts[1])
        interval = np.maximum(0, size - off // g)
        prog1 = np.where(off % c1 == 0, np.maximum(0, e1 - off // c1), 0)
        prog2 = np.where(off % c2 == 0, np.maximum(0, e2 - off // c2), 0)
        # A progression of one term when the other extent is 1 (both 1: a single point, off 0 or not).
        out = np.where((e1 > 1) & (e2 > 1), interval, np.where(e2 == 1, prog1, prog2))
        if out.shape != shape:
            out = np.broadcast_to(out, shape)
    else:
        out = np.zeros(shape, dtype=np.int64)
    # (checked before broadcasting: ``broadcast_to`` costs more than the check on these small arrays, and this runs
    # for every operand axis and level of every call of the vectorized model)
    if np.any(holes):
        holes = np.broadcast_to(holes, shape)
        out = out.copy()
        b = [np.broadcast_to(x, shape) for x in (*exts, *shifts)]
        k = len(coeffs)
        for ix in zip(*np.nonzero(holes), strict=True):
            e = tuple(int(x[ix]) for x in b[:k])
            out[ix] = exact_overlap(coeffs, e, e, tuple(int(x[ix]) for x in b[k:]))
    return out


# ``operand_axes`` by the operand's id, with the operand (so the id is not reused while the entry lives): an
# operand's hash walks its indices, and the model asks for its axes tens of thousands of times per layer.
_AXES: dict[int, tuple[Operand, tuple]] = {}


def operand_axes(X: Operand) -> tuple[tuple[tuple[int, ...], tuple[str, ...]], ...]:
    """Per index of X: its coefficients and dims."""
    hit = _AXES.get(id(X))
    if hit is not None and hit[0] is X:
        return hit[1]
    if len(_AXES) >= 4096:
        _AXES.clear()
    axes = tuple((tuple(cf for _, cf in ix.terms), tuple(d for d, _ in ix.terms)) for ix in X.indices)
    _AXES[id(X)] = (X, axes)
    return axes


def axis_sizes(X: Operand, ext: dict[str, np.ndarray]) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Per row, for tiles of extents ``ext``: each axis' size of X, the points of X touched, and a
    mask of rows with a holed axis."""
    n = len(next(iter(ext.values())))
    tile = None
    holes = np.zeros(n, dtype=bool)
    axes = []
    for cf, ds in operand_axes(X):
        a, h = axis_size(cf, [ext[d] for d in ds])
        axes.append(a)
        # (the product of the axes' sizes, a new array: a single axis' size may be the extent itself)
        tile = np.array(a, dtype=np.int64) if tile is None else tile * a
        if h is not None:
            holes |= h
    if tile is None:                      # a scalar operand: one point per tile
        tile = np.ones(n, dtype=np.int64)
    return axes, tile, holes


def tile_sizes(X: Operand, ext: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Points of X touched by tiles of extents ``ext`` per row, and a mask of rows with holed axes."""
    return axis_sizes(X, ext)[1:]


def cycles(bits, bw: float | None) -> np.ndarray:
    """Cycles to move ``bits`` through a port of ``bw`` bits per cycle (None: unbounded)."""
    bits = np.asarray(bits, dtype=float)
    if bw is None:
        return np.zeros_like(bits)
    return np.where(bits > 0, bits / bw, 0.0)


class NestRows:
    """The per-row quantities every term needs: strides, inner extents, instances, transition
    classes and deltas (each computed once per level and operand, on first use)."""

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
        # inner[c][d]: extent of d inside level c (every loop at c or deeper, clipped to the
        # operator: the first tile of an imperfect factor), built deepest first
        self.inner: list[dict[str, np.ndarray]] = [{} for _ in range(nlev + 1)]
        raw = {d: np.ones(n, dtype=np.int64) for d in op.dim_names}
        self.inner[nlev] = raw
        for c in range(nlev - 1, -1, -1):
            raw = dict(raw)
            for j, (d, lv, _) in enumerate(structure):
                if lv == c:
                    raw[d] = raw[d] * B[:, j]
            # loops on axes the level is shared along lie inside its tiles too (``Accelerator.inside``)
            ext = dict(raw)
            for j, (d, lv, ax) in enumerate(structure):
                if lv < c and arch.inside(c, lv, ax):
                    ext[d] = ext[d] * B[:, j]
            self.inner[c] = {d: np.minimum(e, op.sizes[d]) for d, e in ext.items()}
        self.dim_product = raw
        self.perfect = np.ones(n, dtype=bool)
        for d, e in raw.items():
            self.perfect &= e == op.sizes[d]
        self.temporal_slots = [j for j, s in enumerate(structure) if s[2] is None]
        self.total = np.prod(B, axis=1)
        self.temporal = np.prod(B[:, self.temporal_slots], axis=1) if self.temporal_slots else np.ones(n, np.int64)
        self._used: dict[int, np.ndarray] = {}
        self._classes: dict[int, tuple] = {}
        self._all_classes: tuple | None = None
        self._deltas: dict[tuple[str, int], tuple] = {}
        self._sizes: dict[tuple[str, int], tuple] = {}
        self._fits: dict[int | tuple, np.ndarray] = {}   # per level: rows whose tiles fit twice (and one-tile rows)
        self._edges: dict[int, list] = {}
        self._loads: dict[tuple, tuple | None] = {}   # (level, operand): loads per class; ("burst", level)
        self._moving: dict[tuple[frozenset[str], int], np.ndarray] = {}   # (dims, level): loops moving a tile
        self._footprints: dict[str, int] = {}
        self._above: dict[int, list[int]] = {}
        self._steps: dict[int, np.ndarray] = {}
        self._memo: dict[tuple, Any] = {}   # latency terms that depend on the nest and its keep only
        self._geo: dict[tuple, Any] = {}    # ... and those that depend on the nest alone

    # What depends on the loops alone (not on which operands each level keeps, nor on the counts): a nest of the
    # same operator, accelerator and loops shares it (``of_mapping``).
    GEOMETRY = ("stride", "inner", "dim_product", "perfect", "temporal_slots", "total", "temporal", "_used",
                "_classes", "_deltas", "_sizes", "_edges", "_moving", "_footprints", "_above", "_steps", "_geo")

    @classmethod
    def of_mapping(cls, op: Operator, arch: Accelerator, m) -> NestRows:
        """The one-row nest of a mapping. The last one built is kept: a mapping of the same operator and
        accelerator with the same loops (a search trying another bypass choice of one tiling: the heuristic's
        climbs do so at every step) shares its geometry, and computes afresh only what depends on ``keep``."""
        key = (id(op), id(arch), m.loops)
        last = _LAST_MAPPING_NEST.get(key)
        if last is not None and last.op is op and last.arch is arch:
            return last.same_loops()
        structure = [(l.dim, l.level, l.axis) for l in m.loops]
        B = np.array([[l.bound for l in m.loops]], dtype=np.int64).reshape(1, len(structure))
        nest = cls(op, arch, structure, B)
        _LAST_MAPPING_NEST.clear()
        _LAST_MAPPING_NEST[key] = nest
        return nest

    def same_loops(self) -> NestRows:
        """A nest of the same loops sharing this one's geometry (its caches included), with none of the
        terms that depend on ``keep`` or the counts."""
        other = NestRows.__new__(NestRows)
        other.op, other.arch, other.structure, other.B, other.n, other.nlev = (
            self.op, self.arch, self.structure, self.B, self.n, self.nlev)
        for name in self.GEOMETRY:
            setattr(other, name, getattr(self, name))
        other._all_classes = self._all_classes
        other._fits, other._loads, other._memo = {}, {}, {}
        return other

    def footprint(self, X: Operand) -> int:
        """``op.footprint(X)``, counted once per nest (it counts index points, about 70 us on a convolution, and the
        counts, the energy and the latency terms of one call ask for the output's four or five times)."""
        if X.name not in self._footprints:
            self._footprints[X.name] = self.op.footprint(X)
        return self._footprints[X.name]

    def used(self, level: int) -> np.ndarray:
        """Instances of ``level`` the rows occupy: product of the spatial loops above it."""
        if level not in self._used:
            out = np.ones(self.n, dtype=np.int64)
            for j, (_, lv, ax) in enumerate(self.structure):
                if ax is not None and not self.arch.inside(level, lv, ax):
                    out = out * self.B[:, j]
            self._used[level] = out
        return self._used[level]

    def lineages(self, X: Operand, level: int) -> np.ndarray:
        """Branches of a spatial reduction above ``level`` per row: the spatial loops above it over
        dims X does not use. Each branch holds its own partial sums of X."""
        out = np.ones(self.n, dtype=np.int64)
        for j, (d, lv, ax) in enumerate(self.structure):
            if ax is not None and not self.arch.inside(level, lv, ax) and d not in X.dims:
                out = out * self.B[:, j]
        return out

    def sizes(self, X: Operand, c: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """X's tile at level c per row: each axis' size, the whole tile and the rows with a holed axis."""
        key = (X.name, c)
        if key not in self._sizes:
            self._sizes[key] = axis_sizes(X, self.inner[c])
        return self._sizes[key]

    def above(self, c: int) -> list[int]:
        """Temporal slots above level c (a prefix of all temporal slots; cached: the latency terms ask for it
        hundreds of times per call). Callers must not modify the list."""
        out = self._above.get(c)
        if out is None:
            out = self._above[c] = [j for j in self.temporal_slots if self.structure[j][1] < c]
        return out

    def steps(self, c: int) -> np.ndarray:
        """Iterations of the temporal loops above level c per row (its tiles over the run, counting every
        loop position), read-only and cached."""
        out = self._steps.get(c)
        if out is None:
            out = self._steps[c] = np.prod(self.B[:, self.above(c)], axis=1)
            out.flags.writeable = False
        return out

    def classes(self, c: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Transition classes of level c's tiles, one row of the matrices per temporal loop above
        ``c`` (k-th row: k-th slot of ``above(c)``): transitions (classes x rows; zero where the
        bound is 1: (bound - 1) x the product of the bounds outside it) and, per dim, the shift of
        the tile when that loop advances (its stride on its own dim, minus the span of every loop
        inside it above c, which resets). Dims no loop above c iterates are left out (no shift).

        The slots above c are a prefix of all temporal slots, so everything is computed once over
        all of them: a prefix's transitions are the same, and its resets are the full suffix sums
        less what lies below c."""
        if c in self._classes:
            return self._classes[c]
        if self._all_classes is None:
            B, n = self.B, self.n
            ts = self.temporal_slots
            K = len(ts)
            Ba = B[:, ts]
            outer = np.ones((n, K), dtype=np.int64)
            if K > 1:
                outer[:, 1:] = np.cumprod(Ba[:, :-1], axis=1)
            cnt = ((Ba - 1) * outer).T
            dims_of = [self.structure[j][0] for j in ts]
            names = list(dict.fromkeys(dims_of))
            M = np.array([[x == d for x in dims_of] for d in names]).reshape(len(names), K, 1)
            back = M * ((Ba - 1) * self.stride[:, ts]).T[None]           # dims x slots x rows
            suffix = np.zeros((len(names), K + 1, n), dtype=np.int64)     # suffix[:, k]: sum over slots >= k
            suffix[:, :K] = np.cumsum(back[:, ::-1], axis=1)[:, ::-1]
            shift = M * self.stride[:, ts].T[None] - (suffix[:, :K] - back)
            self._all_classes = (cnt, names, dims_of, shift, suffix)
        cnt, names, dims_of, shift, suffix = self._all_classes
        K = len(self.above(c))
        present = set(dims_of[:K])
        shifts = {d: shift[i, :K] + suffix[i, K] for i, d in enumerate(names) if d in present}
        self._classes[c] = cnt[:K], shifts
        return self._classes[c]

    def deltas(self, X: Operand, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """X's tile at level c per row: whole tile, elements entering per class (classes x rows; the
        first instance's tiles, inner loops reset), and the elements counted over the run (tile +
        transitions x deltas)."""
        key = (X.name, c)
        if key in self._deltas:
            return self._deltas[key]
        ext = self.inner[c]
        cnt, shifts = self.classes(c)
        sizes, full, holes = self.sizes(X, c)
        ov = np.ones(cnt.shape, dtype=np.int64)
        whole = (stored_points(X, tuple(tuple(self.op.sizes[d] for d, _ in ix.terms) for ix in X.indices))
                 if self.arch.padding_generated else (None,) * len(X.indices))
        for (cf, ds), size, w in zip(operand_axes(X), sizes, whole, strict=True):
            if any(d in shifts for d in ds):
                zero = np.zeros(cnt.shape, dtype=np.int64)
                e = [ext[d] for d in ds]
                # (a single-term axis has no holes: its closed size is not needed)
                holed = _closed_size(cf, e) < 0 if len(cf) > 1 else False
                o = axis_overlap(cf, e, [shifts.get(d, zero) for d in ds], size, holed)
            else:
                o = size             # an axis that does not shift overlaps whole
            if w is not None:
                # a tile spanning the whole padded axis moves its stored points only (``padding: generated``);
                # it never shifts, so it overlaps whole
                spans = np.all([ext[d] == self.op.sizes[d] for d in ds], axis=0)
                full = np.where(spans, full // np.maximum(size, 1) * w, full)
                o = np.where(spans, w, o)
            ov = ov * o
        dl = full - ov
        counted = full + (cnt * dl).sum(axis=0)
        self._deltas[key] = full, dl, counted
        return full, dl, counted

    def edges(self, c: int) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
        """Edge tiles of level c: per dim whose factors overshoot its size and whose only loop above
        c (of bound above 1) is its outermost one, g: (dim, k of g in ``above(c)`` per row or -1,
        g's bound, the edge tile's extent size - (bound - 1) x stride, at most the full extent)."""
        if c in self._edges:
            return self._edges[c]
        out: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []
        if self.perfect.all():          # no factor overshoots: no edge tiles (the common case)
            self._edges[c] = out
            return out
        above = self.above(c)
        pos = {j: k for k, j in enumerate(above)}
        rows = np.arange(self.n)
        for d in self.op.dim_names:
            js = [j for j, s in enumerate(self.structure) if s[0] == d]
            if not js:
                continue
            live = self.B[:, js] > 1
            imperfect = self.dim_product[d] > self.op.sizes[d]
            if not imperfect.any():
                continue
            first = np.argmax(live, axis=1)                   # outermost loop of d with bound > 1
            g = np.array(js)[first]
            k = np.array([pos.get(j, -1) for j in js])[first]
            others_above = (live & np.array([j in pos for j in js])[None]).sum(axis=1) - (k >= 0)
            ok = imperfect & live.any(axis=1) & (k >= 0) & (others_above == 0)
            if not ok.any():
                continue
            b = self.B[rows, g]
            e = np.minimum(self.inner[c][d], self.op.sizes[d] - (b - 1) * self.stride[rows, g])
            out.append((d, np.where(ok, k, -1), b, e))
        self._edges[c] = out
        return out


def final_outputs(nest: NestRows, keep) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Accesses that carry finished outputs, per level of the output's chain: (updates, drains) per
    row. A finished value exists where no spatial reduction above the level is still open (one
    branch): it is written into such a level once per output element (its last update) and leaves
    it once (its last drain, below the outermost level); elsewhere every value is a partial sum.
    The compute side's updates of the innermost level count as that level's updates."""
    X = nest.op.output
    n_out = nest.footprint(X)
    chain = [i for i in range(nest.nlev) if X.name in keep[i]]
    out = {}
    for k, i in enumerate(chain):
        final = np.where(nest.lineages(X, i) == 1, n_out, 0)
        out[i] = (final, final if k else np.zeros_like(final))
    return out


def output_bits(nest: NestRows, keep, counts) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Bits of the output's (updates, drains) per level of its chain and row: partial sums at the
    operand's precision, finished outputs at the compute unit's ``final_output_bits`` (the
    precision its output stage writes results at) when the accelerator gives one."""
    X = nest.op.output
    fb = nest.arch.compute.final_output_bits
    out = {}
    finals = final_outputs(nest, keep) if fb is not None else {}
    for i in (i for i in range(nest.nlev) if X.name in keep[i]):
        c = counts[(i, X.name)]
        upd, drn = c[2] * X.bits, c[3] * X.bits
        if fb is not None:
            fu, fd = finals[i]
            upd, drn = upd - fu * (X.bits - fb), drn - fd * (X.bits - fb)
        out[i] = (upd, drn)
    return out


def fewest_bits(X: Operand, arch: Accelerator) -> int:
    """The fewest bits one access of X can carry: the output's finished values may move at the
    output stage's precision (lower bounds on cost must use this)."""
    fb = arch.compute.final_output_bits
    return min(X.bits, fb) if X.is_output and fb is not None else X.bits
