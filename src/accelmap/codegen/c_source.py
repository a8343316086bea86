"""Emit one C file that runs a mapped operator with explicit tile transfers.

The file has a static buffer per (level, kept operand, instance), the loop nest
of the mapping written out as C loops (temporal and spatial alike; spatial
instances run one after the other), a tile update of every kept operand at the
position where the loops of its level begin, and the multiply-accumulate in
the innermost body. Transfers are counted per (level, operand) with the cost
model's rules (``c_runtime.py``); the exported entry point is

    int accelmap_run(void **tensors, long long *counters)

with ``tensors`` in operand order (stored shapes, row-major, padding not
stored) and ``counters`` of shape [levels][operands][fills, reads, updates, drains].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

from accelmap.arch.accelerator import Accelerator
from accelmap.codegen.c_runtime import C_RUNTIME
from accelmap.cost.access_counts import stored_points
from accelmap.errors import SpecError
from accelmap.mapping.loopnest import Mapping, loop_strides
from accelmap.mapping.validate import validate
from accelmap.workload.numpy_reference import stored_shape as tensor_shape
from accelmap.workload.operator import Operand, Operator

DTYPES = ("int", "fp32")


def c_type(operand: Operand, dtype: str) -> tuple[str, int]:
    """C element type and size of an operand: int8 x int8 -> int32 (wider if the operator says so), or fp32."""
    if dtype == "fp32":
        return "float", 4
    if operand.is_output:
        return ("int32_t", 4) if operand.bits <= 32 else ("int64_t", 8)
    if operand.bits <= 8:
        return "int8_t", 1
    if operand.bits <= 16:
        return "int16_t", 2
    return "int32_t", 4


def stored_shape(op: Operator, X: Operand) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shape of the tensor in memory and the padding before each axis."""
    shape = tensor_shape(op, X)
    pad = X.pad_lo or tuple(0 for _ in X.indices)
    return tuple(shape), tuple(pad)


@dataclass(frozen=True)
class BufferPlan:
    """Where operand X lives at level ``level`` and how it is refilled from ``parent``."""

    operand: int
    level: int
    parent: int
    instances: int
    box: tuple[int, ...]
    extents: tuple[int, ...]      # tile extent of every dim at this level

    @property
    def ring(self) -> int:
        return math.prod(self.box)


def _inner_extent(op: Operator, arch: Accelerator, m: Mapping, d: str, level: int) -> int:
    return math.prod(l.bound for l in m.loops if l.dim == d and arch.inside(level, l.level, l.axis))


def plan_buffers(op: Operator, arch: Accelerator, m: Mapping) -> list[BufferPlan]:
    plans = []
    nlev = len(arch.levels)
    for k, X in enumerate(op.operands):
        chain = [i for i in range(nlev) if X.name in m.keep[i]]
        for p, c in pairwise(chain):
            ext = tuple(_inner_extent(op, arch, m, d, c) for d in op.dim_names)
            clipped = {d: min(e, op.sizes[d]) for d, e in zip(op.dim_names, ext, strict=True)}
            box = tuple(sum(cf * (clipped[d] - 1) for d, cf in ix.terms) + 1 for ix in X.indices)
            inst = math.prod(l.bound for l in m.loops if l.spatial and not arch.inside(c, l.level, l.axis))
            plans.append(BufferPlan(k, c, p, inst, box, ext))
    return plans


def collapsed_loops(op: Operator, arch: Accelerator, m: Mapping, X: Operand, lo: int, hi: int) -> list[int]:
    """Spatial loops between levels lo and hi over dims X does not use that merge instances into one
    group: multicast for inputs (if the axis can), reduction for outputs (validated)."""
    return [i for i, l in enumerate(m.loops) if l.spatial and arch.inside(lo, l.level, l.axis)
            and not arch.inside(hi, l.level, l.axis) and l.dim not in X.dims
            and (X.is_output or arch.fanout_axis(l.level, l.axis).multicast)]


def nest_order(arch: Accelerator, m: Mapping) -> list[int]:
    """The order the C nest runs the mapping's loops in (indices into ``m.loops``): the mapping's, except that
    the spatial loops on the axes a level is shared along run just above that level's own loops, inside every
    loop above it. Spatial instances run one after another in C; a shared instance's tile must stay while the
    instances that share it take their turns, as it does in hardware, where they run at once."""
    order = list(range(len(m.loops)))
    for c in range(len(arch.levels) - 1, 0, -1):
        if not arch.levels[c].shared_axes:
            continue
        moved = [i for i in order if m.loops[i].level < c and arch.inside(c, m.loops[i].level, m.loops[i].axis)]
        rest = [i for i in order if i not in moved]
        at = next((k for k, i in enumerate(rest) if m.loops[i].level >= c), len(rest))
        order = rest[:at] + moved + rest[at:]
    return order


def _inner_steps(op: Operator, arch: Accelerator, m: Mapping, p: BufferPlan) -> int:
    X = op.operands[p.operand]
    coll = collapsed_loops(op, arch, m, X, p.parent, p.level)
    if not coll:
        return 1
    return math.prod(l.bound for i, l in enumerate(m.loops) if i > min(coll) and not l.spatial and l.level < p.level)


def _c_array(vals) -> str:
    return "{" + ", ".join(str(int(v)) for v in vals) + "}"


def _pad(vals, n, fill=0) -> list:
    vals = list(vals)
    return vals + [fill] * (n - len(vals))


def dram_strides(shape: tuple[int, ...], order: tuple[int, ...] | None) -> list[int]:
    """Element stride of each axis of a tensor of ``shape`` stored with its axes in ``order`` (outermost
    first; None: the declared order, row-major)."""
    order = tuple(range(len(shape))) if order is None else tuple(order)
    if sorted(order) != list(range(len(shape))):
        raise SpecError(f"layout {order} is not an order of the {len(shape)} axes of a tensor of shape {shape}")
    out = [0] * len(shape)
    step = 1
    for a in reversed(order):
        out[a] = step
        step *= shape[a]
    return out


def generate_c(op: Operator, arch: Accelerator, m: Mapping, dtype: str = "int",
               layouts: dict[str, tuple[int, ...]] | None = None, fetched_only: frozenset[str] | None = None) -> str:
    """The C source; refuses a mapping that does not fit before writing anything. ``layouts``: operand
    name -> the order of its axes in memory, outermost first (others: the declared order); the tensors
    passed to the program must be stored that way (``execute.run_generated`` with the same layouts).

    ``fetched_only`` (input operands): the program moves only those operands' tiles from memory into the first
    on-chip level keeping them (their DMA tiles: what the outermost level's counters of them count), running only
    the loops above that level and no multiply-accumulate; a fused group's block fetches its weights so
    (``codegen.fused_weights``). Its counters at the outermost level equal the whole program's for them: the loops
    it leaves out only revisit a tile already there (the runtime moves nothing then). An operand the mapping keeps
    on no on-chip level has no tile: it is read from memory at each multiply-accumulate, once per multicast group
    (the whole program's rule, ``_emit_mac``), so for it the program runs every loop and reads it at each point of
    the iteration space as the whole program does, without multiplying."""
    if dtype not in DTYPES:
        raise SpecError(f"data type {dtype!r} is not supported; use one of {', '.join(DTYPES)}", where="--dtype")
    layouts = layouts or {}
    validate(op, arch, m)
    written = m
    nlev, nops = len(arch.levels), len(op.operands)
    dims = list(op.dim_names)
    dix = {d: i for i, d in enumerate(dims)}
    # A loop's stride belongs to it, wherever the C nest runs it (nest_order moves the loops of shared axes).
    order = nest_order(arch, m)
    strides = [loop_strides(m)[i] for i in order]
    m = Mapping(tuple(m.loops[i] for i in order), m.keep)
    loops = list(m.loops)
    NL = len(loops)
    NLA = max(NL, 1)
    plans = plan_buffers(op, arch, m)
    read_at_mac: frozenset[int] = frozenset()      # fetched operands no on-chip level keeps
    if fetched_only is not None:
        plans, read_at_mac = _fetch_plans(op, arch, m, plans, fetched_only)
    by_key = {(p.operand, p.level): p for p in plans}
    maxax = max(len(X.indices) for X in op.operands)
    maxt = max(len(ix.terms) for X in op.operands for ix in X.indices)
    maxext = max(e for X in op.operands for e in op.index_extent(X)) + 1
    out_k = next(k for k, X in enumerate(op.operands) if X.is_output)
    O = op.operands[out_k]
    acc_t = c_type(O, dtype)[0]
    o_ext = op.index_extent(O)
    n_out = math.prod(o_ext)
    o_stride = [math.prod(o_ext[a + 1:]) for a in range(len(o_ext))]

    def collapsed(X: Operand, lo: int, hi: int) -> list[int]:
        return collapsed_loops(op, arch, m, X, lo, hi)

    def lineage_loops(X: Operand, below: int) -> list[int]:
        return [i for i, l in enumerate(loops) if l.spatial and not arch.inside(below, l.level, l.axis)
                and l.dim not in X.dims]

    out: list[str] = []
    w = out.append
    w(f"/* accelmap: {op} */")
    w(f"/* on {arch.name}, dtype {dtype}; generated, do not edit */")
    for line in _mapping_comment(op, arch, written):
        w(f"/* {line} */")
    w(f"#define MAXAX {maxax}\n#define MAXT {maxt}\n#define ND {len(dims)}\n#define NL {NLA}")
    w(f"#define NLEV {nlev}\n#define NOPS {nops}\n#define MAXEXT {maxext}")
    w("#include <stdint.h>")
    w(f"typedef {acc_t} acc_t;")
    w(f"#define L_DIM_INIT {_c_array(_pad([dix[l.dim] for l in loops], NLA))}")
    w(f"#define L_STRIDE_INIT {_c_array(_pad(strides, NLA, 1))}")
    w(f"#define L_BOUND_INIT {_c_array(_pad([l.bound for l in loops], NLA, 1))}")
    w(f"#define L_LEVEL_INIT {_c_array(_pad([l.level for l in loops], NLA, nlev))}")
    w(f"#define L_SPATIAL_INIT {_c_array(_pad([int(l.spatial) for l in loops], NLA))}")
    w("#define L_ABOVE_INIT {" + ", ".join(_c_array(_pad([int(not arch.inside(c, l.level, l.axis)) for l in loops], NLA))
                                         for c in range(nlev + 1)) + "}")
    w(f"#define SIZE_INIT {_c_array([op.sizes[d] for d in dims])}")
    w(C_RUNTIME)

    # ---- buffers, sized from the tile the level holds (the mapping was checked against its capacity)
    w("/* buffers: one ring per (level, operand, instance) */")
    for p in plans:
        X = op.operands[p.operand]
        ct, es = c_type(X, dtype)
        lv = arch.levels[p.level]
        tag = f"{lv.name}_{X.name}"
        w(f"static {ct} BUF_{tag}[{p.instances * p.ring}];  /* {p.instances} instance(s) x {p.ring} elements "
          f"(ring {'x'.join(map(str, p.box))}); {lv.name} capacity {lv.describe_capacity()} */")
        w(f"static tstate_t ST_{tag}[{p.instances}];")
        nslots = p.instances * _inner_steps(op, arch, m, p)
        w(f"static long long STAMP_{tag}[{nslots}];")
        w(f"static long COV_{tag}[{nslots}];")
        if X.is_output:
            nlin = math.prod(loops[i].bound for i in lineage_loops(X, p.parent))
            w(f"static unsigned char TCH_{tag}[{nlin * n_out}];")
    last_o = [i for i in range(nlev) if O.name in m.keep[i]][-1]
    nlin_c = math.prod(loops[i].bound for i in lineage_loops(O, last_o)) if fetched_only is None else 0
    w(f"static unsigned char TCH_COMPUTE[{max(1, nlin_c * n_out)}];")
    w(f"static const long OSTRIDE[{len(o_stride)}] = {_c_array(o_stride)};")

    # ---- descriptors
    for p in plans:
        X = op.operands[p.operand]
        es = c_type(X, dtype)[1]
        tag = f"{arch.levels[p.level].name}_{X.name}"
        shape, pad = stored_shape(op, X)
        tstride = dram_strides(shape, layouts.get(X.name))
        pitch = [math.prod(p.box[a + 1:]) for a in range(len(p.box))]
        parent_top = p.parent == 0
        pp = None if parent_top else by_key[(p.operand, p.parent)]
        pbox = pp.box if pp else [1] * len(p.box)
        ppitch = [math.prod(pbox[a + 1:]) for a in range(len(pbox))]
        above = [i for i, l in enumerate(loops) if not arch.inside(p.level, l.level, l.axis)]
        coll = set(collapsed(X, p.parent, p.level))
        lin = set(lineage_loops(X, p.parent)) if X.is_output else set()
        nt = [len(ix.terms) for ix in X.indices]
        # ``padding: generated``: an axis the tile spans whole moves its stored rows only (cost/access_counts)
        halo = (stored_points(X, tuple(tuple(op.sizes[d] for d, _ in ix.terms) for ix in X.indices))
                if arch.padding_generated else (None,) * len(X.indices))
        skip = [int(h is not None and all(p.extents[dix[d]] >= op.sizes[d] for d, _ in ix.terms))
                for h, ix in zip(halo, X.indices, strict=True)]
        td = [_pad([dix[d] for d, _ in ix.terms], maxt) for ix in X.indices]
        tc = [_pad([c for _, c in ix.terms], maxt) for ix in X.indices]
        first_coll = min(coll) if coll else NL
        inner = [i for i in above if i > first_coll and not loops[i].spatial]
        fields = {
            "lvl": p.level, "plvl": p.parent, "op": p.operand, "is_out": int(X.is_output), "esize": es,
            "naxes": len(X.indices),
            "nt": _c_array(_pad(nt, maxax)),
            "td": "{" + ", ".join(_c_array(t) for t in _pad(td, maxax, [0] * maxt)) + "}",
            "tc": "{" + ", ".join(_c_array(t) for t in _pad(tc, maxax, [0] * maxt)) + "}",
            "ext": _c_array(_pad(op.index_extent(X), maxax, 1)),
            "box": _c_array(_pad(p.box, maxax, 1)), "pitch": _c_array(_pad(pitch, maxax, 0)),
            "E": _c_array(p.extents), "parent_top": int(parent_top),
            "shape": _c_array(_pad(shape, maxax, 1)), "pad": _c_array(_pad(pad, maxax)),
            "tstride": _c_array(_pad(tstride, maxax)),
            "pbox": _c_array(_pad(pbox, maxax, 1)), "ppitch": _c_array(_pad(ppitch, maxax)),
            "ring": p.ring, "pring": pp.ring if pp else 0,
            "above": _c_array(_pad(above, NLA)), "nabove": len(above),
            "collapsed": _c_array([int(i in coll) for i in range(NLA)]),
            "lineage": _c_array([int(i in lin) for i in range(NLA)]), "nlineage": len(lin),
            "inner": _c_array([int(i in inner) for i in range(NLA)]),
            "skip": _c_array(_pad(skip, maxax)), "anyskip": int(any(skip)),
        }
        w(f"static const bufd_t D_{tag} = {{" + ", ".join(f".{k} = {v}" for k, v in fields.items()) + "};")

    # ---- the nest
    w("\nint accelmap_run(void **T, long long *counters) {")
    w("    memset(CNT, 0, sizeof CNT);")
    for p in plans:
        X = op.operands[p.operand]
        tag = f"{arch.levels[p.level].name}_{X.name}"
        w(f"    memset(BUF_{tag}, 0, sizeof BUF_{tag}); memset(ST_{tag}, 0, sizeof ST_{tag}); "
          f"memset(COV_{tag}, 0, sizeof COV_{tag});")
        w(f"    for (long i = 0; i < {p.instances * _inner_steps(op, arch, m, p)}; i++) STAMP_{tag}[i] = -1;")
        if X.is_output:
            w(f"    memset(TCH_{tag}, 0, sizeof TCH_{tag});")
            if op.init_output == "read":
                w(f"    memset(TCH_{tag}, 1, {n_out});  /* lineage 0 reads the prior value */")
    w("    memset(TCH_COMPUTE, 0, sizeof TCH_COMPUTE);")
    if op.init_output == "read" and fetched_only is None:
        w(f"    memset(TCH_COMPUTE, 1, {n_out});")
    w("    int V[NL] = {0};")

    def buf_ptr(k: int, level: int) -> str:
        X = op.operands[k]
        if level == 0:
            return f"(char *)T[{k}]"
        return f"(char *)BUF_{arch.levels[level].name}_{X.name}"

    def visit_calls(level: int, ind: str) -> None:
        for p in plans:
            if p.level != level:
                continue
            X = op.operands[p.operand]
            tag = f"{arch.levels[p.level].name}_{X.name}"
            tch = f"TCH_{tag}" if X.is_output else "0"
            w(f"{ind}visit(&D_{tag}, ST_{tag}, (char *)BUF_{tag}, {buf_ptr(p.operand, p.parent)}, (char *)T[{p.operand}], "
              f"V, STAMP_{tag}, COV_{tag}, {tch}, {n_out}, OSTRIDE);  /* tile of {X.name} at {arch.levels[level].name} */")

    def boundary(pos: int) -> list[int]:
        """Levels whose tiles are reached at nest position ``pos``: right after the last loop above them."""
        res = []
        for c in range(1, nlev):
            if 1 + max((i for i, l in enumerate(loops) if not arch.inside(c, l.level, l.axis)), default=-1) == pos:
                res.append(c)
        return res

    # with ``fetched_only``: the loops above the levels the fetched tiles land in (the others stay at 0)
    # (every loop where an operand is read at each multiply-accumulate)
    emitted = [fetched_only is None or bool(read_at_mac) or any(not arch.inside(p.level, l.level, l.axis) for p in plans)
               for l in loops]
    ind = "    "
    for k, l in enumerate(loops):
        for c in boundary(k):
            visit_calls(c, ind)
        if not emitted[k]:
            continue
        kind = f"spatial @{l.axis}" if l.spatial else "temporal"
        w(f"{ind}for (V[{k}] = 0; V[{k}] < {l.bound}; V[{k}]++) {{  /* {l.dim} {l.bound} at "
          f"{arch.levels[l.level].name}, {kind} */")
        ind += "    "
        if not l.spatial:
            outs = [p for p in plans if op.operands[p.operand].is_output and p.level > l.level]
            if outs:
                w(f"{ind}if (V[{k}] > 0) {{  /* a new step of the levels below: drain what leaves, deepest first */")
                for p in sorted(outs, key=lambda p: -p.level):
                    tag = f"{arch.levels[p.level].name}_{op.operands[p.operand].name}"
                    w(f"{ind}    predrain(&D_{tag}, ST_{tag}, (char *)BUF_{tag}, {buf_ptr(p.operand, p.parent)}, "
                      f"(char *)T[{p.operand}], V, {k});")
                w(f"{ind}}}")
    for c in boundary(NL if loops else 0):
        visit_calls(c, ind)
    if fetched_only is None:
        _emit_mac(w, ind, op, arch, m, strides, by_key, dtype, collapsed, lineage_loops, o_stride)
    elif read_at_mac:
        _emit_mac(w, ind, op, arch, m, strides, by_key, dtype, collapsed, lineage_loops, o_stride, read_at_mac)
    for _ in range(sum(emitted)):
        ind = ind[:-4]
        w(f"{ind}}}")
    for p in sorted([p for p in plans if op.operands[p.operand].is_output], key=lambda p: -p.level):
        tag = f"{arch.levels[p.level].name}_{op.operands[p.operand].name}"
        w(f"    flush(&D_{tag}, ST_{tag}, (char *)BUF_{tag}, {buf_ptr(p.operand, p.parent)}, (char *)T[{p.operand}], "
          f"{p.instances});")
    w("    memcpy(counters, CNT, sizeof CNT);")
    w("    return 0;\n}")
    return "\n".join(out) + "\n"


def _fetch_plans(op: Operator, arch: Accelerator, m: Mapping, plans: list[BufferPlan],
                 fetched: frozenset[str]) -> tuple[list[BufferPlan], frozenset[int]]:
    """The buffer plans of the ``fetched`` input operands at the first on-chip level keeping each (its parent the
    tensor in memory), and the indices of those no on-chip level keeps (read from memory at every
    multiply-accumulate: no tile to fetch); one clear line for an output."""
    names = {X.name: k for k, X in enumerate(op.operands)}
    out = []
    at_mac = set()
    for x in sorted(fetched):
        k = names.get(x)
        if k is None or op.operands[k].is_output:
            raise SpecError(f"{op.name}: {x!r} is not an input operand ({', '.join(X.name for X in op.inputs)})")
        first = [p for p in plans if p.operand == k and p.parent == 0]
        if not first:
            at_mac.add(k)
        out += first
    return out, frozenset(at_mac)


def _mapping_comment(op: Operator, arch: Accelerator, m: Mapping) -> list[str]:
    from accelmap.mapping.forms import format_text

    return format_text(m, arch, op).splitlines()


def _emit_mac(w, ind, op, arch, m, strides, by_key, dtype, collapsed, lineage_loops, o_stride,
              only: frozenset[int] | None = None) -> None:
    """The innermost body: every operand's element read (counted where the whole program counts it) and the
    multiply-accumulate; with ``only`` (input operands kept on no on-chip level), just those operands' reads from
    memory, counted the same way, and no multiply-accumulate."""
    loops = list(m.loops)
    nlev = len(arch.levels)
    dims = list(op.dim_names)
    for d in dims:
        terms = [f"V[{i}] * {strides[i]}" for i, l in enumerate(loops) if l.dim == d]
        w(f"{ind}const int d_{d} = {' + '.join(terms) if terms else '0'};")
    imperfect = [d for d in dims if m.dim_product(d) != op.sizes[d]]
    cond = " && ".join(f"d_{d} < {op.sizes[d]}" for d in imperfect) or "1"
    w(f"{ind}if ({cond}) {{  /* a valid point of the iteration space */")
    ind2 = ind + "    "
    names = []
    for k, X in enumerate(op.operands):
        if only is not None and k not in only:
            continue
        chain = [i for i in range(nlev) if X.name in m.keep[i]]
        last = chain[-1]
        ct = c_type(X, dtype)[0]
        vals = [" + ".join(f"{cf} * d_{d}" for d, cf in ix.terms) for ix in X.indices]
        for a, v in enumerate(vals):
            w(f"{ind2}const int x{k}_{a} = {v};")
        if last == 0:
            shape, pad = stored_shape(op, X)
            ts = [math.prod(shape[a + 1:]) for a in range(len(shape))]
            inb = " && ".join(f"x{k}_{a} - {pad[a]} >= 0 && x{k}_{a} - {pad[a]} < {shape[a]}"
                              for a in range(len(shape)) if pad[a] or X.shape)
            off = " + ".join(f"(long)(x{k}_{a} - {pad[a]}) * {ts[a]}" for a in range(len(shape)))
            if X.is_output:
                w(f"{ind2}{ct} *p{k} = ({ct} *)T[{k}] + ({off});")
            else:
                w(f"{ind2}const {ct} e{k} = ({inb or '1'}) ? (({ct} *)T[{k}])[{off}] : 0;")
        else:
            p = by_key[(k, last)]
            pitch = [math.prod(p.box[a + 1:]) for a in range(len(p.box))]
            sp = [i for i, l in enumerate(loops) if l.spatial and not arch.inside(last, l.level, l.axis)]
            inst = "0"
            for i in sp:
                inst = f"({inst}) * {loops[i].bound} + V[{i}]"
            slot = " + ".join(f"(long)(x{k}_{a} % {p.box[a]}) * {pitch[a]}" for a in range(len(p.box)))
            ref = f"BUF_{arch.levels[last].name}_{X.name}[(long)({inst}) * {p.ring} + {slot}]"
            if X.is_output:
                w(f"{ind2}{ct} *p{k} = &{ref};")
            else:
                w(f"{ind2}const {ct} e{k} = {ref};")
        coll = collapsed(X, last, nlev)
        lead = " && ".join(f"V[{i}] == 0" for i in coll) or "1"
        if X.is_output:
            lin = lineage_loops(X, last)
            lid = "0"
            for i in lin:
                lid = f"({lid}) * {loops[i].bound} + V[{i}]"
            oidx = " + ".join(f"(long)x{k}_{a} * {o_stride[a]}" for a in range(len(X.indices)))
            w(f"{ind2}if ({lead}) {{  /* one update per reduction group; the first in a lineage writes without reading */")
            w(f"{ind2}    unsigned char *t = &TCH_COMPUTE[(long)({lid}) * {math.prod(op.index_extent(X))} + {oidx}];")
            w(f"{ind2}    CNT[{last}][{k}][UPDATES]++; if (*t) CNT[{last}][{k}][READS]++; else *t = 1;")
            w(f"{ind2}}}")
        else:
            w(f"{ind2}if ({lead}) CNT[{last}][{k}][READS]++;  /* one read per multicast group */")
        names.append(k)
    if only is not None:
        # the elements read, kept from being optimized away: a fetch reads them
        w(f"{ind2}{{ static volatile long long fetched_sink; fetched_sink += "
          + " + ".join(f"(long long)e{k}" for k in names) + "; }")
        w(f"{ind}}}")
        return
    ok = next(k for k, X in enumerate(op.operands) if X.is_output)
    prod = " * ".join(f"(acc_t)e{k}" for k in names if k != ok)
    w(f"{ind2}*p{ok} += {prod};")
    w(f"{ind}}}")
