"""The vector unit's block instructions: what the timing model charges and which statements the C issues them for.

The DaVinci vector unit does not compute element by element: one instruction (``vadd``, ``vmul``, ``vmax``,
``vexp``, ``vconv``, ...) processes ``repeat`` repeats, each of 8 blocks of 32 contiguous bytes in UB (256 bytes;
a mask covers a partial last repeat), with strides between blocks and repeats (PLDI 2021, Sec. 2; AKG's
kVBlockNum x kVBlockSize). A statement's body of k operations is k instructions (AKG emits one intrinsic per
operation), each over the same elements.

Here a vector statement runs along *rows*: the instances of one tile that differ only in the dim its innermost
loop steps (``Compiled.vector_row_dims``). Per row every operation is one instruction of
``ceil(n * bytes / 256)`` repeats (n elements of the statement's widest type), so a tile costs
``rows x ops`` instructions and ``rows x ops x ceil(n * bytes / 256)`` repeats, one repeat per cycle. A
statement whose innermost loop is strided fills each block with one element: ``ops x ceil(elements / 8)``.
``vector_work`` is that one definition; the timing model charges it and the code issues it.

In the C a statement runs as one call per row when (``vector_rows``; otherwise it stays element by element and
``VectorRows.notes`` says why): it is in its kernel's own group (a fused producer's instances come from an
extension node, which restricting the domain does not reach, as for the cube); its innermost loop is
contiguous; every access reads or writes along the row at +1 on its last axis, or not at all (a broadcast
operand, or a reduction's accumulator: ``vcadd``/``vcmax`` over the row); the innermost band runs only this
statement and its last member is the row dim; every row's operands start at a 32-byte-aligned element of
their buffers, whose rows are whole 32-byte blocks and which a row does not wrap around (the staged boxes are
indexed modulo the box). The AST then keeps only each row's first instance, and the statement's macro calls
``vec_S<n>(origin, n)``, a C function that runs the operations one instruction at a time over the row (into
temporaries of the width the element-by-element expression computes in, so results are identical to it) and
counts the instructions and repeats in ``accelmap_counts[3]`` and ``[4]``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import islpy as isl

from accelmap.poly.kernel import Affine, Call, Const, Expr, Iter, Kernel, Statement, dtype_bytes
from accelmap.poly.schedule import innermost_band, is_type, statements_of

if TYPE_CHECKING:
    from accelmap.poly.compile import Compiled, KernelPlan

VECTOR_BYTES = 256   # one repeat
VECTOR_BLOCKS = 8    # blocks of 32 contiguous bytes per repeat (AKG's kVBlockNum)
BLOCK_BYTES = VECTOR_BYTES // VECTOR_BLOCKS

_MNEMONIC = {"+": "vadd", "-": "vsub", "*": "vmul", "/": "vdiv", "max": "vmax", "min": "vmin",
             "==": "vcmp_eq", "<": "vcmp_lt", ">": "vcmp_gt", "<=": "vcmp_le", ">=": "vcmp_ge",
             "neg": "vneg", "abs": "vabs", "sqrt": "vsqrt", "exp": "vexp", "select": "vsel", "cast": "vconv"}


def operations(e: Expr) -> list[Call]:
    """The operations of an expression in evaluation order (post-order): one instruction each. An operation on
    constants only is a scalar operand (``1.0 / 256`` in ``x * (1.0 / 256)``), not an instruction."""
    if isinstance(e, Call) and not _constant(e):
        return [x for a in e.args for x in operations(a)] + [e]
    return []


def _constant(e: Expr) -> bool:
    return isinstance(e, Const) or (isinstance(e, Call) and all(_constant(a) for a in e.args))


def mnemonic(e: Call) -> str:
    return _MNEMONIC[e.op]


def reduces_row(st: Statement, dim: str | None) -> bool:
    """An update whose accumulator does not move along the row: the row is reduced into one element."""
    return st.kind == "update" and dim is not None and dim not in st.out.dims_used()


def instructions(st: Statement, dim: str | None) -> list[str]:
    """The instructions one row of ``st`` issues, in order: one per operation of the body (a body without
    operations is a copy or a fill), then the reduction's combine."""
    ops = [mnemonic(e) for e in operations(st.body)]
    if st.kind == "update":
        ops.append(("vcadd" if st.combine == "+" else "vcmax") if reduces_row(st, dim)
                   else ("vadd" if st.combine == "+" else "vmax"))
    elif not ops:
        ops = ["vector_dup" if isinstance(st.body, Const | Iter) else "vcopy"]
    return ops


def vector_bytes(k: Kernel, st: Statement) -> int:
    """Bytes per element of a row: the widest tensor the statement touches (it sets the elements per repeat)."""
    return max(dtype_bytes(k.tensors[a.tensor].dtype) for a in [st.out, *st.reads])


def row_repeats(n: int, nbytes: int) -> int:
    """Repeats of one instruction over a row of ``n`` elements (a mask covers the partial last repeat)."""
    return math.ceil(n * nbytes / VECTOR_BYTES)


def vector_work(k: Kernel, st: Statement, box: dict[str, int], contiguous: bool,
                dim: str | None) -> tuple[int, int]:
    """(instructions, repeats) of ``st`` over a tile whose instances span ``box``: per row of the row dim, one
    instruction per operation of ``ceil(n * bytes / 256)`` repeats; strided (one element per 32-byte block):
    ``ceil(elements / 8)`` repeats per operation."""
    ops = len(instructions(st, dim))
    elements = math.prod(box.values())
    if contiguous and dim is not None and dim in box:
        rows = elements // box[dim]
        return rows * ops, rows * ops * row_repeats(box[dim], vector_bytes(k, st))
    if contiguous:   # a single element, or a row dim the tile does not vary
        return ops, ops * row_repeats(elements, vector_bytes(k, st))
    per = math.ceil(elements / VECTOR_BLOCKS)
    return ops * per, ops * per


@dataclass(frozen=True)
class VectorRow:
    plan: int
    stmt: str
    dim: str                      # the row dim
    length_c: str                 # the row's length as a C expression of the origin's dims (``prefix``ed)
    nbytes: int                   # bytes per element (repeats per instruction)
    extent: int                   # the longest row: the temporaries' size


@dataclass
class VectorRows:
    rows: list[VectorRow] = field(default_factory=list)
    origins: dict[str, isl.Set] = field(default_factory=dict)   # statement -> the row origins the code runs
    tile_origins: dict[str, isl.UnionMap] = field(default_factory=dict)   # fused producer -> (tile, row origin)
    notes: list[str] = field(default_factory=list)                # vector statements left element by element


def _renamed(ix: Affine, prefix: str) -> str:
    return Affine(tuple((prefix + d if isinstance(d, str) else d, c) for d, c in ix.terms), ix.const).isl()


def _access_problem(st: Statement, dim: str) -> str:
    for a in [st.out, *st.reads]:
        for axis, ix in enumerate(a.index):
            if dim not in ix.dims:
                continue
            plain = [(d, c) for d, c in ix.terms if isinstance(d, str)]
            if len(plain) != len(ix.terms):
                return f"{a} indexes its row dim {dim} through a division"
            if axis != len(a.index) - 1:
                return f"{a} moves along axis {axis} with its row dim {dim} (a stride, not a row)"
            if dict(plain)[dim] != 1:
                return f"{a} steps its last axis by {dict(plain)[dim]} along the row dim {dim}"
    return ""


def _buffer_extent(c: Compiled, plan: KernelPlan, tensor: str) -> tuple[int, bool]:
    """The last-axis extent of the array ``tensor`` is read from in this kernel's code, and whether it is a box
    indexed modulo (a staged or promoted tile) rather than the caller's array."""
    f = plan.footprints.get(tensor)
    if f is not None and (f.local or tensor in plan.copy_in or tensor in plan.copy_out):
        return f.box[-1], True
    return c.kernel.tensors[tensor].shape[-1], False


def vector_rows(c: Compiled, schedule: isl.Schedule, skip: set[str], prefix: str, fused: bool = False) -> VectorRows:
    """Which vector statements of ``c`` run as row instructions in the code of ``schedule`` (``skip``: statements
    the code does not run, such as a reduction's init folded into the cube's first mmad; ``prefix``: of the
    macros' parameters). With ``fused`` only the fused producers, whose rows ``with_fused_rows`` then
    restricts their extensions to (``c_code.with_fused_rows``); otherwise only the kernels' own statements."""
    k = c.kernel
    layout = k.layout_statements()
    res = VectorRows()
    root = schedule.get_root()
    for plan in c.plans:
        for name in plan.statements:
            st = k.statement(name)
            if st.is_cube or name in layout or name in skip or (name in plan.group) == fused:
                continue
            why = _why_not(c, plan, st, root, prefix)
            if isinstance(why, str):
                res.notes.append(f"{name} stays element by element: {why}")
                continue
            row, origins, tile_origins = why
            res.rows.append(row)
            res.origins[name] = origins
            if tile_origins is not None:
                res.tile_origins[name] = tile_origins
    return res


def _extension_above(node: isl.ScheduleNode, stmt: isl.UnionSet) -> isl.ScheduleNode | None:
    """The nearest extension node above ``node`` that brings instances of ``stmt`` in."""
    for up in range(1, node.get_tree_depth() + 1):
        anc = node.ancestor(up)
        if is_type(anc, isl.schedule_node_type.extension) \
                and not anc.extension_get_extension().intersect_range(stmt).is_empty():
            return anc
    return None


def _loops_to(band: isl.ScheduleNode, stmt: isl.UnionSet) -> tuple[isl.UnionMap, int]:
    """Instances -> the values of every loop around them down to ``band``'s members, and how many of those are
    tile coordinates of an extension (0 for a kernel's own statements). isl gives no prefix schedule for the
    instances an extension node brings in: there it is the extension's tile coordinates, then the bands below."""
    ext = _extension_above(band, stmt)
    if ext is None:
        return band.get_prefix_schedule_relation().flat_range_product(band.band_get_partial_schedule_union_map()), 0
    rel = ext.extension_get_extension()
    n_tile = _domain_dims(rel)
    loops = rel.reverse()
    depth = ext.get_tree_depth()
    for level in range(band.get_tree_depth() - depth - 1, -1, -1):
        anc = band.ancestor(level) if level else band
        if is_type(anc, isl.schedule_node_type.band):
            loops = loops.flat_range_product(anc.band_get_partial_schedule_union_map())
    return loops, n_tile


def _domain_dims(rel: isl.UnionMap) -> int:
    maps: list[isl.Map] = []
    rel.foreach_map(maps.append)
    return maps[0].dim(isl.dim_type.in_)


def _by_row(values: isl.Set, n: int) -> isl.Map:
    """The loop values [p, v] of a row as the map p -> [p, v]."""
    m = isl.Map.from_range(values).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, n - 1)   # p -> [v]
    ident = isl.Map.identity(m.domain().get_space().map_from_set()).intersect_domain(m.domain())
    return ident.flat_range_product(m)


def _why_not(c: Compiled, plan: KernelPlan, st: Statement, root: isl.ScheduleNode,
             prefix: str) -> str | tuple[VectorRow, isl.Set, isl.UnionMap | None]:
    prog = c.program
    if not st.dims:
        return "it computes a single element"
    cube = [w.name for w in c.kernel.writer(st.out.tensor) if w.is_cube and w.name in plan.statements]
    if st.kind == "init" and cube:   # the timing model charges no vector work for it (the mmad's init bit)
        return f"it initializes the accumulator of cube statement {cube[0]}, whose first mmad clears it"
    if not c.vector_contiguous.get(st.name, True):
        return "its innermost loop walks its data with a stride (one element per 32-byte block)"
    dim = c.vector_row_dims.get(st.name)
    if dim is None:
        return "no dim of its innermost loop steps its data by one element"
    problem = _access_problem(st, dim)
    if problem:
        return problem
    band = innermost_band(root, st.name)
    if band is None:
        return "it has no band"
    mine = prog.stmt_set([st.name])
    at_band, n_tile = _loops_to(band, mine)
    # instances -> loop values: one per instance, several for a fused producer's instance in overlapping tiles
    full = isl.Map.from_union_map(at_band.intersect_domain(mine))
    n = total = full.dim(isl.dim_type.out)
    values = full.range()
    while n > 1 and values.dim_max_val(n - 1).eq(values.dim_min_val(n - 1)):   # a member constant for this statement
        full, n = full.project_out(isl.dim_type.out, n - 1, 1), n - 1
        values = full.range()
    names = st.dim_names
    x = ", ".join(names)
    y = ", ".join(f"y_{d}" for d in names)
    along = isl.Map(f"{{ {st.name}[{x}] -> [{dim}] }}", context=prog.ctx)
    rows = full.project_out(isl.dim_type.out, n - 1, 1).reverse()          # outer loop values p -> a row's instances
    same = rows.reverse().apply_range(rows)
    fixed = isl.Map(f"{{ {st.name}[{x}] -> {st.name}[{y}] : "
                    f"{' and '.join(f'y_{d} = {d}' for d in names if d != dim) or 'true'} }}", context=prog.ctx)
    if not same.is_subset(fixed):
        return "a row of its innermost loop changes another dim"
    # along a row the innermost loop advances exactly as the row dim does (a point loop may be offset by its tile)
    walk = full.flat_range_product(along).range()                           # [p, v, row dim]
    outer = [f"a{i}" for i in range(n - 1)]
    in_row = isl.Map(f"{{ [{', '.join(outer + ['v', 'e'])}] -> [{', '.join(outer + ['v2', 'e2'])}] }}",
                     context=prog.ctx)
    step = isl.Map.from_domain_and_range(walk, walk).intersect(in_row).deltas()
    lockstep = isl.Set(f"{{ [{', '.join(['0'] * (n - 1) + ['a', 'a'])}] }}", context=prog.ctx)
    if not step.is_subset(lockstep):
        return f"the innermost loop is not its row dim {dim}"
    shift = isl.Map(f"{{ {st.name}[{x}] -> {st.name}[{', '.join(f'{d} + 1' if d == dim else d for d in names)}] }}",
                    context=prog.ctx)
    starts = rows.subtract(rows.apply_range(shift).intersect(rows))        # p -> the row's first instance
    if not starts.is_single_valued():
        return "a row of its innermost loop has gaps"
    # no other statement of the band runs at or between a row's first and last loop values
    first, last = _by_row(values, n).lexmin(), _by_row(values, n).lexmax()
    order = _sequence_below(band) if n == total else {}   # a dropped member would order them before the sequence
    for other in sorted(set(statements_of(band.band_get_partial_schedule_union_map().domain())) - {st.name}):
        theirs = isl.Map.from_union_map(at_band.intersect_domain(prog.stmt_set([other]))).project_out(
            isl.dim_type.out, n, total - n)
        # at the same loop values the sequence below the band decides: before the row's first, after its last
        earlier = order.get(other, -1) >= 0 and order.get(other, -1) < order.get(st.name, -1)
        later = order.get(other, -1) > order.get(st.name, -1) >= 0
        inside = (first.lex_lt_map(theirs) if earlier else first.lex_le_map(theirs)).intersect(
            last.lex_gt_map(theirs) if later else last.lex_ge_map(theirs))
        if not inside.is_empty():
            return f"{other} runs inside its rows (the innermost loop would have to be distributed)"
    origins = starts.range()
    row_of = starts.reverse().apply_range(rows)                            # origin -> its rows' instances
    if dict(st.dims)[dim] > 1 and row_of.is_subset(isl.Map.identity(row_of.get_space())):
        return f"its innermost loop does not walk its row dim {dim} (another loop runs between its elements)"
    for a in [st.out, *st.reads]:
        if dim not in a.index[-1].dims:
            continue
        nbytes = dtype_bytes(c.kernel.tensors[a.tensor].dtype)
        per_block = max(1, BLOCK_BYTES // nbytes)
        extent, modular = _buffer_extent(c, plan, a.tensor)
        if extent % per_block:
            return f"the rows of {a.tensor}'s buffer are {extent} elements, not whole 32-byte blocks"
        misaligned = isl.Set(f"{{ {st.name}[{x}] : ({a.index[-1].isl()}) mod {per_block} != 0 }}", context=prog.ctx)
        if not origins.intersect(misaligned).is_empty():
            return f"a row of {a} starts at an element that is not 32-byte aligned"
        if modular:
            wrap = isl.Map(f"{{ {st.name}[{x}] -> {st.name}[{y}] : floor(({a.index[-1].isl()})/{extent}) != "
                           f"floor(({_renamed(a.index[-1], 'y_')})/{extent}) }}", context=prog.ctx)
            if not row_of.intersect(wrap).is_empty():
                return f"a row of {a} wraps around its buffer's box"
    # the row's length: its last instance's row dim minus the origin's, plus one; the same in every tile that
    # starts a row at that instance (the macro knows only the instance)
    end = starts.reverse().apply_range(rows.apply_range(along).lexmax())
    if not end.is_single_valued():
        return "overlapping tiles give a row starting at one element different lengths"
    length = isl.PwMultiAff.from_map(end).get_pw_aff(0).sub(
        isl.PwAff.var_on_domain(isl.LocalSpace.from_space(origins.get_space()), isl.dim_type.set,
                                names.index(dim))).add_constant_val(isl.Val.one(prog.ctx)).gist(origins)
    tile_origins = None
    if n_tile:   # the extension's pairs (tile, instance) that start a row
        tile_origins = isl.UnionMap.from_map(
            starts.reverse().project_out(isl.dim_type.out, n_tile, n - 1 - n_tile).reverse())
    return VectorRow(plan.index, st.name, dim, _pw_aff_c(length, names, prefix), vector_bytes(c.kernel, st),
                     dict(st.dims)[dim]), origins, tile_origins


def _sequence_below(band: isl.ScheduleNode) -> dict[str, int]:
    """Statement -> position in the sequence right below ``band`` (empty without one)."""
    if not band.has_children() or not is_type(band.child(0), isl.schedule_node_type.sequence):
        return {}
    seq = band.child(0)
    return {name: i for i in range(seq.n_children()) for name in statements_of(seq.child(i).filter_get_filter())}


def _pw_aff_c(pa: isl.PwAff, names: tuple[str, ...], prefix: str) -> str:
    """A piecewise quasi-affine function of the statement's dims as a C expression over the macro's parameters
    (``prefix``ed, parenthesized: a macro argument may be a sum)."""
    n = pa.dim(isl.dim_type.in_)
    p = pa.move_dims(isl.dim_type.param, 0, isl.dim_type.in_, 0, n)
    for i, d in enumerate(names):
        p = p.set_dim_id(isl.dim_type.param, i, isl.Id(f"{prefix}{d}", context=pa.get_ctx()))
    text = isl.AstBuild.from_context(isl.Set.universe(p.domain().get_space())).expr_from_pw_aff(p).to_C_str()
    return "(" + re.sub(rf"\b({prefix}\w+)\b", r"(\1)", text) + ")"
