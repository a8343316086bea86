"""Schedule templates: the knob space of an operator on an accelerator, and the program a configuration builds.

The template follows the VTA convolution schedule that AutoTVM tunes (TVM's ``vta.top`` conv2d
schedule, as extended with loop permutations in Rieber's dissertation, ch. 5):

* the spatial unrolling is fixed by the compute unit (VTA's GEMM intrinsic: output channels on
  the columns, input channels on the reduction tree, the batch on the rows of an 8x8x8 core);
* one **split knob** per remaining dimension (``tile_b``, ``tile_co``, ``tile_ci``, ``tile_h``,
  ``tile_w`` for a convolution): how much of it each on-chip level's tile holds. With one tiled level
  the options are the divisors (AutoTVM's two-way split); with more levels, every ordered
  factorization. Kernel windows (R, S) stay whole inside the innermost tile, as in the VTA schedule;
* a **permutation knob** over the order of the tile loops at the outermost level: which operand's
  tile stays while the others stream (output-, weight-, input-stationary, and output-stationary with
  rows outside);
* **virtual-thread knobs** (``oc_nthread``, ``h_nthread`` in {1, 2}) where the innermost tile level
  can double-buffer: the threads take turns on the buffers, so loads overlap compute; each thread
  owns its tile, so ``threads x tile`` must fit, and the outer loop a thread splits must divide.
* **core knobs** (``cores``, ``core_dim``) on an accelerator with several cores (its ``cores`` field):
  how many cores the operator is split over, and along which output dim. Each core runs the tile
  program of its share (the operator with that dim divided by the cores) with the same tile knobs; the
  cores run the same program in lockstep, so they share the outermost level's bandwidth equally.

A configuration is *valid* when its program can be built: the mapping passes the capacity and
structure checks of ``mapping.validate`` and the target's program limits (``tune.limits``: micro-op
buffer, hardware loop counters, thread divisibility). Invalid configurations are the rule: buffer
overflows make most of a space invalid, as the dissertation measured on VTA (mean valid ratio 0.083).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import AccelmapError, SpecError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.validate import capacity_usage, validate
from accelmap.tune.knobs import Knob, KnobSpace, divisors
from accelmap.tune.limits import ProgramLimits, limits_for
from accelmap.workload.operator import Operator

# Dims that stay whole in the innermost tile (kernel windows, as VTA's schedule keeps kh/kw inside).
WINDOW_DIMS = ("R", "S")
# Thread knobs per operator kind: (knob name, dim it splits). VTA's template has oc_nthread and h_nthread.
THREAD_DIMS = {"conv2d": (("oc_nthread", "K"), ("h_nthread", "P")),
               "matmul": (("n_nthread", "N"), ("m_nthread", "M")),
               "dense": (("oc_nthread", "K"), ("b_nthread", "N"))}
THREAD_OPTIONS = (1, 2)
# Order of the loops inside a tile, outermost first: VTA's conv2d schedule reorders its compute stage to
# (batch, input channels, columns, kernel columns, kernel rows, output channels, rows) around the GEMM
# intrinsic; the two outermost of these become the GEMM instruction's hardware loops.
INNER_ORDER = {"conv2d": ("N", "C", "Q", "S", "R", "K", "P")}
# Knob names of the split knobs, after AutoTVM's VTA conv2d template where it has one.
SPLIT_NAMES = {"N": "tile_b", "K": "tile_co", "C": "tile_ci", "P": "tile_h", "Q": "tile_w"}


class TemplateError(AccelmapError):
    """The operator cannot be expressed by the template on this accelerator (one line, why)."""


@dataclass(frozen=True)
class Built:
    """What a configuration builds: the accelerator variant (buffering), the mapping, or why it cannot."""

    arch: Accelerator | None
    mapping: Mapping | None
    error: str | None = None
    layouts: tuple[tuple[str, tuple[int, ...]], ...] = ()   # operand -> its axis order in DRAM, if not declared
    cores: int = 1                    # cores the operator is split over; the mapping is one core's share
    share: Operator | None = None     # that share (the operator with the split dim divided), when cores > 1

    @property
    def layout_map(self) -> dict[str, tuple[int, ...]]:
        return dict(self.layouts)

    @property
    def valid(self) -> bool:
        return self.error is None


def default_spatial(op: Operator, arch: Accelerator) -> dict[str, str]:
    """axis -> dim of the compute unit's fixed unrolling, from the axis names of the presets."""
    axes = arch.fanout_axes()
    by_kind = {
        "conv2d": {"X": "N", "Y": "K", "Z": "C", "OX": "Q", "K": "K"},
        "dense": {"X": "N", "Y": "K", "Z": "C"},
        "matmul": {"X": "M", "Y": "N", "Z": "K"},
    }
    table = by_kind.get(op.kind)
    if table is None:
        raise TemplateError(f"no schedule template for {op.kind} operators (conv2d, dense and matmul have one)")
    out = {}
    for axis in axes:
        if axis not in table:
            raise TemplateError(f"{arch.name}: no template binding for fan-out axis {axis}; "
                                f"pass spatial={{axis: dim}} for axes {sorted(axes)}")
        out[axis] = table[axis]
    return out


def core_dims(op: Operator, spatial_bound: dict[str, int]) -> list[str]:
    """Dims an operator can be split along over cores without the cores exchanging data: output dims that
    every operand indexes plainly (no window or stride: a core's share reads its own slice), of size 2 or
    more in blocks of the compute unit."""
    out = []
    for d in op.output.dims:
        plain = all(ix.dims != (d,) or ix.terms == ((d, 1),) for X in op.operands for ix in X.indices)
        mixed = any(d in ix.dims and len(ix.dims) > 1 for X in op.operands for ix in X.indices)
        if plain and not mixed and op.sizes[d] // spatial_bound.get(d, 1) >= 2:
            out.append(d)
    return [d for d in op.dim_names if d in out]


def core_share(op: Operator, dim: str, cores: int) -> Operator:
    """The part of ``op`` one of ``cores`` cores computes when ``dim`` is split evenly over them."""
    size = op.sizes[dim] // cores
    operands = []
    for X in op.operands:
        shape = tuple(size if ix.dims == (dim,) else n for ix, n in zip(X.indices, X.shape, strict=True)) \
            if X.shape else X.shape
        operands.append(replace(X, shape=shape))
    return replace(op, name=f"{op.name}/{cores}", dims=tuple((d, size if d == dim else n) for d, n in op.dims),
                   operands=tuple(operands))


def shared_outer_bandwidth(arch: Accelerator, cores: int) -> Accelerator:
    """One core's view of ``arch`` when ``cores`` cores run the same program in lockstep: every transfer of
    the outermost level happens on all of them at once, so each gets an equal share of its bandwidth."""
    if cores == 1:
        return arch
    top = arch.levels[0]
    share = replace(top, read_bw_bits=None if top.read_bw_bits is None else top.read_bw_bits / cores,
                    write_bw_bits=None if top.write_bw_bits is None else top.write_bw_bits / cores)
    return replace(arch, levels=(share,) + arch.levels[1:])


def stationary_orders(op: Operator, dims: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """Named outer-loop orders: for each operand, the dims it does not use innermost (its tile stays
    while they run); then the output-stationary order with the last spatial output dim outermost."""
    out_dims = set(op.output.dims)
    orders: list[tuple[str, tuple[str, ...]]] = []
    for X in (op.output,) + tuple(op.inputs):
        used = [d for d in dims if d in X.dims]
        rest = [d for d in dims if d not in X.dims]
        label = {"O": "output", "I": "input", "W": "weight"}.get(X.cls, X.name) + "-stationary"
        orders.append((label, tuple(used + rest)))
    rows_first = [d for d in dims if d in out_dims]
    if len(rows_first) > 1:
        rows_first = rows_first[-2:] + rows_first[:-2]
        orders.append(("output-stationary, rows outer",
                       tuple(rows_first + [d for d in dims if d not in out_dims])))
    seen, unique = set(), []
    for label, order in orders:
        if order not in seen:
            seen.add(order)
            unique.append((label, order))
    return unique


def ordered_factorizations(n: int, parts: int) -> tuple[tuple[int, ...], ...]:
    """Every (f_1, ..., f_parts) of divisors whose product divides n (the rest goes outside)."""
    if parts == 1:
        return tuple((d,) for d in divisors(n))
    out = []
    for d in divisors(n):
        for rest in ordered_factorizations(n // d, parts - 1):
            out.append((d,) + rest)
    return tuple(out)


def input_layouts(op: Operator) -> list[tuple[str, tuple[int, ...]]]:
    """The DRAM layouts of a convolution's input the embedding leaves open: its axes as declared
    (NCHW; VTA's blocked NCHWnc) or with the channels innermost (NHWC; NHWCnc), the intrinsic's
    channel block innermost in both. One layout for other operators."""
    if op.kind != "conv2d":
        return []
    X = next(X for X in op.inputs if X.cls == "I")
    axes = list(range(len(X.indices)))
    chan = next((a for a, ix in enumerate(X.indices) if ix.dims == ("C",)), None)
    if chan is None:
        return []
    last = [a for a in axes if a != chan] + [chan]
    return [("NCHW", tuple(axes)), ("NHWC", tuple(last))]


class ScheduleTemplate:
    """The knob space of ``op`` on ``arch`` and the program each configuration builds."""

    def __init__(self, op: Operator, arch: Accelerator, *, spatial: dict[str, str] | None = None,
                 limits: ProgramLimits | None = None, layout_knob: bool = False):
        self.op = op
        self.arch = arch
        self.limits = limits if limits is not None else limits_for(arch)
        self.spatial = dict(spatial) if spatial is not None else default_spatial(op, arch)
        axes = arch.fanout_axes()
        unknown = sorted(set(self.spatial) - set(axes))
        if unknown:
            raise SpecError(f"spatial names axes {unknown} that {arch.name} does not have ({sorted(axes)})")
        self.fan_level = {lvl for lvl, _ in axes.values()}
        if len(self.fan_level) != 1:
            raise TemplateError(f"{arch.name}: the template needs one fan-out level, it has {len(self.fan_level)}")
        fan = next(iter(self.fan_level))
        # Tile levels: every level between the outermost and the fan-out, innermost last.
        self.tile_levels = list(range(1, fan + 1))
        if not self.tile_levels:
            raise TemplateError(f"{arch.name}: the fan-out sits below the outermost level; nothing to tile")
        self.spatial_bound: dict[str, int] = {}
        for axis, dim in self.spatial.items():
            if dim not in op.sizes:
                raise TemplateError(f"{op.name} has no dim {dim} for axis {axis}")
            size = axes[axis][1].size
            if op.sizes[dim] % size:
                raise TemplateError(f"{op.name}: {dim}={op.sizes[dim]} is not a multiple of axis {axis} ({size}); "
                                    f"the intrinsic needs it padded, which this template does not do")
            self.spatial_bound[dim] = self.spatial_bound.get(dim, 1) * size
        self.split_dims = [d for d in op.dim_names if d not in WINDOW_DIMS
                           and op.sizes[d] // self.spatial_bound.get(d, 1) > 1]
        self.window_dims = [d for d in op.dim_names if d in WINDOW_DIMS and op.sizes[d] > 1]
        self.orders = stationary_orders(op, self.split_dims)
        inner = fan
        self.thread_knobs = [(name, dim) for name, dim in THREAD_DIMS.get(op.kind, ())
                             if dim in self.split_dims] if arch.levels[inner].double_buffered else []
        self.layouts = input_layouts(op) if layout_knob else []
        self.layout_knob = layout_knob
        self.core_counts = divisors(arch.cores) if arch.cores > 1 else (1,)
        self.core_dims = core_dims(op, self.spatial_bound) if arch.cores > 1 else []
        if not self.core_dims:
            self.core_counts = (1,)
        self._shares: dict[tuple[str, int], ScheduleTemplate | str] = {}

    # --- the space -----------------------------------------------------------------------------------
    @cached_property
    def space(self) -> KnobSpace:
        knobs = []
        for d in self.split_dims:
            rest = self.op.sizes[d] // self.spatial_bound.get(d, 1)
            if len(self.tile_levels) == 1:
                options: tuple = divisors(rest)
            else:
                options = ordered_factorizations(rest, len(self.tile_levels))
            knobs.append(Knob(SPLIT_NAMES.get(d, f"tile_{d}"), options, "split"))
        if len(self.orders) > 1:
            # the model sees an order as AutoTVM's reorder knob: the permutation of the tile loops
            perms = tuple(tuple(self.split_dims.index(d) for d in order) for _, order in self.orders)
            knobs.append(Knob("reorder", tuple(label for label, _ in self.orders), "permutation",
                              perms if all(sorted(q) == list(range(len(self.split_dims))) for q in perms) else None))
        for name, _dim in self.thread_knobs:
            knobs.append(Knob(name, THREAD_OPTIONS, "threads"))
        if len(self.layouts) > 1:
            knobs.append(Knob("layout", tuple(label for label, _ in self.layouts), "permutation"))
        if len(self.core_counts) > 1:
            knobs.append(Knob("cores", self.core_counts, "threads"))
            if len(self.core_dims) > 1:
                knobs.append(Knob("core_dim", tuple(self.core_dims), "permutation"))
        return KnobSpace(tuple(knobs))

    def _tile_factors(self, values: dict) -> dict[str, tuple[int, ...]]:
        """dim -> factor at each tile level (outermost tile level first)."""
        out = {}
        for d in self.split_dims:
            v = values[SPLIT_NAMES.get(d, f"tile_{d}")]
            out[d] = (v,) if isinstance(v, int) else tuple(v)
        return out

    # --- building a configuration ----------------------------------------------------------------------
    def build(self, point: tuple[int, ...]) -> Built:
        values = self.space.values(point)
        cores = int(values.get("cores", 1))
        if cores > 1:
            return self._build_share(values, str(values.get("core_dim", self.core_dims[0])), cores)
        factors = self._tile_factors(values)
        order = dict(self.orders)[str(values["reorder"])] if "reorder" in values else tuple(self.split_dims)
        threads: dict[str, int] = {dim: int(values[name]) for name, dim in self.thread_knobs}
        n_threads = math.prod(threads.values()) if threads else 1
        loops: list[Loop] = []
        thread_loops: list[Loop] = []
        for d in order:
            inside = math.prod(factors[d]) * self.spatial_bound.get(d, 1)
            outer = self.op.sizes[d] // inside
            t = threads.get(d, 1)
            if outer % t:
                return Built(None, None, f"{d}: {outer} outer tiles cannot be split among {t} virtual threads")
            if outer // t > 1:
                loops.append(Loop(d, outer // t, 0))
            if t > 1:
                thread_loops.append(Loop(d, t, 0))
        tile_loops = list(loops)      # which output tile is resident: the thread loops each own one
        loops += thread_loops
        inner_order = self._inner_order()
        for pos, lvl in enumerate(self.tile_levels):
            last = pos == len(self.tile_levels) - 1
            for d in inner_order:
                if d in self.split_dims and factors[d][pos] > 1:
                    loops.append(Loop(d, factors[d][pos], lvl))
                elif d in self.window_dims and last:
                    loops.append(Loop(d, self.op.sizes[d], lvl))
            if last:
                for axis, d in self.spatial.items():
                    loops.append(Loop(d, self.arch.fanout_axes()[axis][1].size, lvl, axis))
        keep = tuple(frozenset(o.name for o in self.op.operands if o.cls in lv.holds) for lv in self.arch.levels)
        mapping = Mapping(tuple(loops), keep)
        inner = self.tile_levels[-1]
        arch = self.arch
        if self.thread_knobs:
            lv = arch.levels[inner]
            arch = replace(arch, levels=arch.levels[:inner] + (replace(lv, double_buffered=n_threads > 1),)
                           + arch.levels[inner + 1:])
        try:
            validate(self.op, arch, mapping)
        except AccelmapError as e:
            return Built(arch, mapping, str(e))
        if n_threads > 2:
            # Each virtual thread owns a tile: n_threads tiles must fit where validation counted two.
            for cls_bits, cap in self._usage_by_class(arch, mapping, inner, n_threads / 2):
                if cls_bits > cap:
                    return Built(arch, mapping, f"{n_threads} virtual threads need {cls_bits:,.0f} bits "
                                                f"at {arch.levels[inner].name}, it has {cap:,}")
        lv = arch.levels[inner]
        input_bits = lv.capacity_for("I")
        copies = max(n_threads, 2 if lv.double_buffered else 1)
        layouts = self._layouts(values)
        problem = self.limits.check(self.op, mapping, inner, tile_loops, input_bits, copies, dict(layouts))
        if problem:
            return Built(arch, mapping, problem, layouts)
        return Built(arch, mapping, None, layouts)

    def _share_template(self, dim: str, cores: int) -> ScheduleTemplate | str:
        """The template of one core's share of the operator, or why the split does not divide."""
        key = (dim, cores)
        if key not in self._shares:
            blocks = self.op.sizes[dim] // self.spatial_bound.get(dim, 1)
            if blocks % cores:
                self._shares[key] = (f"{dim}: {blocks} blocks of {self.spatial_bound.get(dim, 1)} cannot be split "
                                     f"evenly over {cores} cores")
            else:
                self._shares[key] = ScheduleTemplate(core_share(self.op, dim, cores), replace(self.arch, cores=1),
                                                     spatial=self.spatial, limits=self.limits,
                                                     layout_knob=self.layout_knob)
        return self._shares[key]

    def _build_share(self, values: dict, dim: str, cores: int) -> Built:
        """A configuration split over cores: one core's share built with the same knob values."""
        share = self._share_template(dim, cores)
        if isinstance(share, str):
            return Built(None, None, share)
        for d in self.split_dims:
            name = SPLIT_NAMES.get(d, f"tile_{d}")
            blocks = share.op.sizes[d] // self.spatial_bound.get(d, 1)
            tile = math.prod(self._tile_factors(values)[d])
            if blocks % tile:
                return Built(None, None, f"{name}={values[name]} does not divide the {blocks} blocks of {d} one of "
                                         f"{cores} cores computes")
        for name, d in self.thread_knobs:
            if int(values[name]) > 1 and (name, d) not in share.thread_knobs:
                return Built(None, None, f"{name}={values[name]}: one of {cores} cores has no loop over {d} to "
                                         f"split among virtual threads")
        point = []
        for knob in share.space.knobs:
            v = values[knob.name]
            if knob.name == "reorder":
                # the share may have fewer distinct orders (a dim of one block drops out): the same order
                order = [d for d in dict(self.orders)[str(v)] if d in share.split_dims]
                v = next(label for label, o in share.orders if list(o) == order)
            point.append(knob.options.index(v))
        built = share.build(tuple(point))
        return replace(built, cores=cores, share=share.op)

    def _layouts(self, values: dict) -> tuple[tuple[str, tuple[int, ...]], ...]:
        if "layout" not in values:
            return ()
        order = dict(self.layouts)[str(values["layout"])]
        X = next(X for X in self.op.inputs if X.cls == "I")
        return () if order == tuple(range(len(X.indices))) else ((X.name, order),)

    def _inner_order(self) -> list[str]:
        """Split and window dims in their order inside a tile: the target schedule's where it has one,
        else the operator's dims with the kernel windows innermost."""
        known = INNER_ORDER.get(self.op.kind)
        dims = self.split_dims + self.window_dims
        if known is not None and set(dims) <= set(known):
            return [d for d in known if d in dims]
        return [d for d in self.op.dim_names if d in self.split_dims] + list(self.window_dims)

    def _usage_by_class(self, arch: Accelerator, mapping: Mapping, level: int, scale: float):
        lv = arch.levels[level]
        use = capacity_usage(self.op, arch, mapping)[level]
        if lv.partitions:
            by_cls: dict[str, int] = {}
            for name, bits in use.items():
                cls = self.op.operand(name).cls
                by_cls[cls] = by_cls.get(cls, 0) + bits
            return [(bits * scale, lv.capacity_for(cls)) for cls, bits in by_cls.items()]
        if lv.capacity_bits is None:
            return []
        return [(sum(use.values()) * scale, lv.capacity_bits)]

    def footprint_features(self, points: np.ndarray) -> np.ndarray:
        """Per operand, log2 of its innermost tile's size in compute blocks (times the virtual threads that
        split one of its dims: each thread owns a tile), one row per configuration. Linear in the knob
        features, but a tree splits one feature at a time, so "how full a buffer is" (Rieber: the best
        configurations sit on the valid region's edge, buffers as full as possible) is one split here and
        many on the tile knobs. Window halos are left out: a feature, not the capacity check."""
        knobs = self.space.knobs
        axis_of = {k.name: a for a, k in enumerate(knobs)}
        cols = []
        for X in self.op.operands:
            col = np.zeros(len(points), dtype=np.float64)
            for d in self.split_dims:
                if d not in X.dims:
                    continue
                a = axis_of[SPLIT_NAMES.get(d, f"tile_{d}")]
                inner = [v if isinstance(v, int) else v[-1] for v in knobs[a].options]
                col += np.log2(np.array(inner, dtype=np.float64))[points[:, a]]
            for name, d in self.thread_knobs:
                if d in X.dims:
                    a = axis_of[name]
                    col += np.log2(np.array(knobs[a].options, dtype=np.float64))[points[:, a]]
            cols.append(col)
        return np.stack(cols, axis=1)

    def describe(self, point: tuple[int, ...]) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.space.values(point).items())
