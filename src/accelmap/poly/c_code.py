"""C from the isl AST of a compiled subgraph, built and run on the host, checked against NumPy.

Each statement becomes a macro the AST's calls expand (``S2(c0 + c3, ...)``). Tensors promoted
to an on-chip buffer (a per-tile footprint, Sec. 4.4) are emulated by a static array of the
footprint's bounding box, indexed modulo the box: inside one tile the footprint spans less than
the box on every axis, so the modular index is one-to-one there. Global tensors are the caller's
arrays. Cube and vector operations are emulated element by element in plain C.
"""

from __future__ import annotations

import ctypes
import math
import time
from dataclasses import dataclass, field

import islpy as isl
import numpy as np

from accelmap.codegen.build import compile_shared, load_run
from accelmap.poly.compile import Compiled, KernelPlan, copy_name, with_extensions
from accelmap.poly.intrinsics import CubeBlock, CubeBlocks, accumulator_ctype, cube_blocks, with_blocks
from accelmap.poly.kernel import CUBE, DTYPES, Access, Affine, Call, Const, Expr, Iter, Kernel, is_float
from accelmap.poly.reference import random_inputs, reference
from accelmap.poly.schedule import group_nodes, next_sequence, subtree_statements
from accelmap.poly.sync import Flag, Instr, issues_per_tile, tile_program
from accelmap.poly.timing import QUEUES, _TileCosts, kernel_flags
from accelmap.poly.vector_intrinsics import VectorRow, VectorRows, instructions, operations, vector_rows

_PRELUDE = """#include <math.h>
#include <stdlib.h>
#define floord(n, d) (((n) < 0) ? -((-(n) + (d) - 1) / (d)) : (n) / (d))
#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))
/* max/min of values propagate NaN as NumPy's maximum/minimum do (loop bounds use the plain ones) */
#define vmax(a, b) ((((a) != (a)) || ((a) > (b))) ? (a) : (b))
#define vmin(a, b) ((((a) != (a)) || ((a) < (b))) ? (a) : (b))
/* set/wait flags between the pipelines (MTE-in 0, MTE L1->L0 1, cube 2, vector 3, MTE-out 4), emulated: the
   queues run in program order here, so a wait must find its flag set by an earlier instruction */
static int accelmap_flags[5][5];
/* work issued: 0 cube mmad blocks, 1 elements moved L0C -> UB, 2 set_flag calls, 3 vector instructions,
   4 their 256-byte repeats */
long long accelmap_counts[5];
static int accelmap_flag_errors;
#define set_flag(p, q) (accelmap_flags[p][q]++, accelmap_counts[2]++)
#define wait_flag(p, q) do { if (accelmap_flags[p][q]-- <= 0) accelmap_flag_errors++; } while (0)
"""


DIM = "d_"   # macro parameters get a prefix so a dim never shadows a tensor of the same name


def ast_code(c: Compiled, schedule: isl.Schedule | None = None) -> str:
    build = isl.AstBuild.from_context(isl.Set("{ : }", context=c.program.ctx))
    return build.node_from_schedule(schedule or c.ast_schedule()).to_C_str()


@dataclass(frozen=True)
class EmittedFlag:
    """A set/wait pair of the DP grouping placed in the code: ``set_stmt`` after ``producer_instr``'s loops,
    ``wait_stmt`` before ``consumer_instr``'s, once per tile."""

    flag: Flag
    set_stmt: str
    wait_stmt: str
    producer_instr: str
    consumer_instr: str


def _instr_statement(c: Compiled, plan: KernelPlan, program: list[Instr], at: int) -> tuple[str, bool]:
    """The statement whose loops carry instruction ``program[at]`` in the code, and whether the instruction runs
    just before those loops rather than in them. An L1 -> L0 load without a copy statement (the operands of a
    cube statement that is a fused producer, which reads them from L1) is issued just before the cube statement
    it feeds: its flags are placed there."""
    ins = program[at]
    words = ins.text.split()
    if words[0] == "copy":
        return copy_name(words[2], plan, words[1]), False
    if words[0] == "load":
        if words[1] in plan.l0_copies:
            return plan.l0_copies[words[1]][2], False
        cube = next(i for i in program[at + 1:] if i.queue == "cube" and f"{words[1]}@L0" in i.reads)
        return cube.text, True
    return ins.text, False


def _flag_position(schedule: isl.Schedule, plan: KernelPlan, x: str, w: str, in_chunk_loop: bool,
                   set_before_x: bool = False) -> tuple[isl.ScheduleNode, int, int] | None:
    """The sequence inside ``plan``'s tiles whose children separate the loops of statements ``x`` and ``w``, and
    the two children. Between it and the tile band there is no loop, so the flag runs once per tile, except with
    ``in_chunk_loop`` (both run in the cube's L0 reduction-chunk loop), where one loop is crossed: the flag runs
    once per chunk. With ``set_before_x`` the set goes before ``x``'s loops (a load issued just before them), so
    ``x`` may be ``w`` itself or run before it in the same child."""
    seq = next_sequence(group_nodes(schedule)[plan.index], 1)   # below the tile band
    while seq is not None:
        where = [subtree_statements(seq.child(i)) for i in range(seq.n_children())]
        ix = [i for i, names in enumerate(where) if x in names]
        iw = [i for i, names in enumerate(where) if w in names]
        if not ix or not iw:
            return None
        if ix[-1] < iw[0] or (set_before_x and ix[0] < iw[0]):
            return seq, (ix[0] if set_before_x else ix[-1]), iw[0]
        if set_before_x and x == w and ix == iw and where[ix[0]] == {x}:
            return seq, ix[0], iw[0]
        if ix != iw or len(ix) != 1:
            return None
        seq = next_sequence(seq.child(ix[0]).child(0), 1 if in_chunk_loop else 0)
    return None


def with_flags(c: Compiled) -> tuple[isl.Schedule, list[EmittedFlag], int]:
    """The AST schedule with the DP-grouped flags of every tiled kernel grafted as statements: the set after the
    producer instruction's loops, the wait before the consumer's, in the tile's sequence of instruction loops
    (an extension from the tile coordinates, like the DMA copies), or, for an L1 -> L0 load and the cube
    statement it feeds, in the sequence inside the reduction-chunk loop (from the prefix values there: once per
    chunk, as the timing model issues them). The L1 -> L0 loads of a cube statement that is a fused producer have
    no statement (it reads its operands from L1): their flags sit just before the cube statement's loops, where
    the loads are issued. Also the number of flags not placed: a position inside a fused producer's extension,
    where isl cannot graft."""
    sched = c.ast_schedule()
    placed: list[EmittedFlag] = []
    skipped = 0
    for plan in c.plans:
        if not plan.sizes or plan.tile_instances is None:
            continue
        program = tile_program(c, plan)
        per_tile = [cyc for cyc, _i, _o, _b in _TileCosts(c, plan).tiles()]
        flags, _direct, _kept = kernel_flags(c, plan, per_tile)
        tiles = plan.tile_instances.domain()
        for j, f in enumerate(flags):
            x, set_before = _instr_statement(c, plan, program, f.set_after)
            w, _ = _instr_statement(c, plan, program, f.wait_before)
            chunked = issues_per_tile(program, f, plan.l0_chunks) > 1
            found = _flag_position(sched, plan, x, w, chunked, set_before)
            if found is None:
                skipped += 1
                continue
            # once per tile, or per chunk: the chunk-loop values where the cube statement (the consumer) runs
            when = found[0].child(found[2]).child(0).get_prefix_schedule_relation().range() if chunked else tiles
            names = (f"set{plan.index}_{j}", f"wait{plan.index}_{j}")
            trial = sched
            try:
                # a set before x's loops is grafted first: the wait grafted before the same loops then follows it
                order = ((names[0], True), (names[1], False)) if set_before else \
                    ((names[1], False), (names[0], True))
                for name, is_set in order:
                    found = _flag_position(trial, plan, x, w, chunked, set_before)
                    assert found is not None
                    seq, ix, iw = found
                    target = seq.child(ix if is_set else iw).child(0)
                    after = is_set and not set_before
                    rel = isl.UnionMap.from_domain_and_range(when, isl.UnionSet(f"{{ {name}[] }}",
                                                                                context=c.program.ctx))
                    graft = isl.ScheduleNode.from_extension(rel).root()
                    trial = (target.graft_after(graft) if after else target.graft_before(graft)).get_schedule()
            except isl.Error:   # the position is inside a fused producer's extension, where isl cannot graft
                skipped += 1
                continue
            sched = trial
            placed.append(EmittedFlag(f, names[0], names[1], program[f.set_after].text,
                                      program[f.wait_before].text))
    return sched, placed, skipped


def _wide(dtype: str) -> str:
    return "double" if is_float(dtype) else "long long"


def _expr(e: Expr, k: Kernel, access) -> str:
    if isinstance(e, Const):
        if isinstance(e.value, float) and math.isinf(e.value):
            return "INFINITY" if e.value > 0 else "(-INFINITY)"
        return repr(float(e.value)) if isinstance(e.value, float) else f"{e.value}LL"
    if isinstance(e, Iter):
        return f"((long long)({DIM}{e.dim}))"
    if isinstance(e, Access):
        return f"(({_wide(k.tensors[e.tensor].dtype)}){access(e)})"
    assert isinstance(e, Call)
    return _call_c(e, [_expr(x, k, access) for x in e.args])


def _call_c(e: Call, a: list[str]) -> str:
    """An operation on operands already in C (the element-by-element code and the vector instructions share it)."""
    if e.op == "cast":
        ctype = DTYPES[e.dtype][0]
        return f"(({_wide(e.dtype)})({ctype})({a[0]}))"
    if e.op == "neg":
        return f"(-{a[0]})"
    if e.op in ("sqrt", "exp"):
        return f"{e.op}({a[0]})"
    if e.op == "abs":
        return f"(({a[0]}) < 0 ? -({a[0]}) : ({a[0]}))"
    if e.op == "select":
        return f"(({a[0]}) ? ({a[1]}) : ({a[2]}))"
    if e.op in ("max", "min"):
        return f"v{e.op}({a[0]}, {a[1]})"
    return f"({a[0]} {e.op} {a[1]})"


def _flat(a: Access, dims, wrap: bool) -> str:
    flat = "0"
    for ix, n in zip(a.index, dims, strict=True):
        term = f"(({ix.c(DIM)}) % {n})" if wrap else f"({ix.c(DIM)})"
        flat = f"({flat}) * {n} + {term}"
    return flat


def _mmad_function(k: Kernel, b: CubeBlock, operand) -> list[str]:
    """One cube block as a C function of the block origin: L0C (+)= L0A x L0B over 16x16x16 elements (fewer at
    the edge of a dim that is not a multiple of 16); an element whose reduction dims are all 0 starts from the
    reduction's identity (the folded init)."""
    st, init = k.statement(b.stmt), k.statement(b.init)
    extent = dict(st.dims)
    out_t = k.tensors[b.out]
    acc_type = accumulator_ctype(out_t.dtype)
    params = ", ".join(f"long long {('o_' if d in b.dims else DIM) + d}" for d in st.dim_names)
    acc = f"{b.l0c()}[{_flat(st.out, b.box, True)}]"
    first = " && ".join(f"{DIM}{d} == 0" for d in st.reduce_dims)
    body = _expr(st.body, k, operand)
    out = [f"static void mmad_{b.stmt}({params}) {{  /* cube: {st.text()}; one {CUBE}x{CUBE}x{CUBE} block of "
           f"M {b.dims[0]}, N {b.dims[1]}, K {b.dims[2]} */",
           "  accelmap_counts[0]++;"]
    indent = "  "
    for d in b.dims:
        out.append(f"{indent}for (long long {DIM}{d} = o_{d}; {DIM}{d} < o_{d} + {CUBE} && {DIM}{d} < {extent[d]}; "
                   f"{DIM}{d}++)")
        indent += "  "
    wide = _wide(out_t.dtype)
    out.append(f"{indent}{acc} = ({acc_type})((({first}) ? ({wide})({_expr(init.body, k, operand)}) : ({wide}){acc})"
               f" + {body});")
    out.append("}")
    out.append(f"#define {st.name}({', '.join(DIM + d for d in st.dim_names)}) mmad_{st.name}"
               f"({', '.join(DIM + d for d in st.dim_names)})")
    return out


def with_fused_rows(c: Compiled, rows: VectorRows) -> Compiled:
    """``c`` with every fused producer that runs in rows brought into its tiles only at its rows' first instances
    (the extension relations restricted, the tree rebuilt)."""
    restricted: dict[int, dict[int, isl.UnionMap]] = {}
    for plan in c.plans:
        for idx, ext in plan.extensions.items():
            new = ext
            for name, pairs in rows.tile_origins.items():
                stmt = c.program.stmt_set([name])
                if not ext.intersect_range(stmt).is_empty():
                    new = new.subtract(new.intersect_range(stmt)).union(pairs)
            if new is not ext:
                restricted.setdefault(plan.index, {})[idx] = new
    return with_extensions(c, restricted) if restricted else c


def _node_type(e: Expr, k: Kernel) -> str:
    """The C type the element-by-element expression computes ``e`` in (a vector temporary keeps it)."""
    if isinstance(e, Access):
        return _wide(k.tensors[e.tensor].dtype)
    if isinstance(e, Const):
        return "double" if isinstance(e.value, float) else "long long"
    if isinstance(e, Iter):
        return "long long"
    assert isinstance(e, Call)
    if e.op == "cast":
        return _wide(e.dtype)
    if e.op in ("==", "<", ">", "<=", ">="):
        return "long long"
    if e.op in ("sqrt", "exp"):
        return "double"
    args = e.args[1:] if e.op == "select" else e.args
    return "double" if any(_node_type(a, k) == "double" for a in args) else "long long"


def _vector_function(k: Kernel, row: VectorRow, access) -> list[str]:
    """One row of a vector statement as a C function of the row's origin and length: each operation is one
    instruction over the row (a loop into a temporary of the type the element-by-element code computes it in,
    so the results are identical), counted with its repeats; the last writes the output (a reduction's combine
    reads the accumulator, a row reduction updates one element along the row in order)."""
    st = k.statement(row.stmt)
    out_t = k.tensors[st.out.tensor]
    ctype = DTYPES[out_t.dtype][0]
    names = instructions(st, row.dim)
    ops = operations(st.body)
    params = ", ".join(f"long long {('o_' if d == row.dim else DIM) + d}" for d in st.dim_names)
    out = [f"static void vec_{st.name}({params}, long long n) {{  /* vector: {st.text()}; per row of "
           f"{row.dim}: {', '.join(names)} */"]
    temp: dict[int, str] = {}
    for j, e in enumerate(ops):
        temp[id(e)] = f"t{j}[i]"
        out.append(f"  static {_node_type(e, k)} t{j}[{row.extent}];")

    def operand(e: Expr) -> str:
        return temp[id(e)] if id(e) in temp else _expr(e, k, access)

    body = operand(st.body) if not ops else temp[id(ops[-1])]
    loops: list[str] = [f"{temp[id(e)]} = {_call_c(e, [operand(a) for a in e.args])}" for e in ops]
    if st.kind == "update":
        acc = f"(({_wide(out_t.dtype)}){access(st.out)})"
        rhs = f"vmax({acc}, {body})" if st.combine == "max" else f"({acc} + {body})"
        loops.append(f"{access(st.out)} = ({ctype})({rhs})")
    elif ops:   # the last operation writes the output
        loops[-1] = f"{access(st.out)} = ({ctype})({_call_c(ops[-1], [operand(a) for a in ops[-1].args])})"
    else:
        loops.append(f"{access(st.out)} = ({ctype})({body})")
    for line, name in zip(loops, names, strict=True):
        out.append(f"  for (long long i = 0; i < n; i++) {{ long long {DIM}{row.dim} = o_{row.dim} + i; {line}; }}"
                   f"  /* {name} */")
        out.append(f"  accelmap_counts[3]++; accelmap_counts[4] += (n * {row.nbytes} + 255) / 256;")
    out.append("}")
    out.append(f"#define {st.name}({', '.join(DIM + d for d in st.dim_names)}) vec_{st.name}"
               f"({', '.join(DIM + d for d in st.dim_names)}, {row.length_c})")
    return out


def code_schedule(c: Compiled) -> tuple[Compiled, isl.Schedule, list[EmittedFlag], CubeBlocks, VectorRows]:
    """The tree the C is printed from: flags placed, blocked cube statements at block origins, vector statements at
    their rows' first instances (fused producers through restricted extensions: ``c`` is returned rebuilt with
    them); also the flags, the cube blocks and the vector rows with the reasons for statements left scalar."""
    fused_rows = vector_rows(c, c.ast_schedule(), set(), DIM, fused=True)
    c = with_fused_rows(c, fused_rows)
    sched, flags, _skipped = with_flags(c)
    blocks = cube_blocks(c, sched)
    sched = with_blocks(c, sched, blocks)
    rows = vector_rows(c, sched, {b.init for b in blocks.blocks}, DIM)
    rows.rows += fused_rows.rows
    rows.notes += fused_rows.notes
    if rows.origins:
        kept = c.program.domain.subtract(c.program.stmt_set(list(rows.origins)))
        for origins in rows.origins.values():
            kept = kept.union(isl.UnionSet.from_set(origins))
        sched = sched.intersect_domain(kept)
    return c, sched, flags, blocks, rows


def generate_c(c: Compiled) -> tuple[str, list[str]]:
    """The C file, and the order of the tensors ``accelmap_run`` takes (inputs, then global results).

    Buffers: a promoted tensor is ``T_local``; a tiled kernel stages the tiles of every off-chip tensor it
    touches in ``T_s<kernel>``, filled and drained by the copy statements ``in<kernel>_T``/``out<kernel>_T``
    (the MTE's work); untiled kernels use the caller's arrays directly.
    """
    c, sched, flags, blocks, rows = code_schedule(c)
    k = c.kernel
    promoted: dict[str, tuple[int, ...]] = {}
    staged: dict[tuple[int, str], tuple[int, ...]] = {}
    owner: dict[str, int] = {}
    for plan in c.plans:
        for name in plan.statements:
            owner[name] = plan.index
        for name, f in plan.footprints.items():
            if f.local:
                promoted[name] = f.box
            elif name in plan.copy_in or name in plan.copy_out:
                staged[(plan.index, name)] = f.box
    args = [t.name for t in k.inputs] + [t.name for t in k.computed if t.name not in promoted]
    lines = [_PRELUDE]
    for name, box in promoted.items():
        lines.append(f"static {DTYPES[k.tensors[name].dtype][0]} {name}_local[{math.prod(box)}];"
                     f"  /* promoted, per-tile box {list(box)} */")
    for (idx, name), box in staged.items():
        lines.append(f"static {DTYPES[k.tensors[name].dtype][0]} {name}_s{idx}[{math.prod(box)}];"
                     f"  /* staged tile of kernel {idx}, box {list(box)} */")
    for name in args:
        lines.append(f"static {DTYPES[k.tensors[name].dtype][0]} *{name};")

    l0: dict[tuple[int, str], tuple[str, tuple[int, ...], str]] = {
        (plan.index, t): v for plan in c.plans for t, v in plan.l0_copies.items()}
    for (idx, name), (buf, box, _) in l0.items():
        lines.append(f"static {DTYPES[k.tensors[name].dtype][0]} {name}_l0{idx}[{math.prod(box)}];"
                     f"  /* {buf} chunk of kernel {idx}, box {list(box)} */")

    def access_in(kernel: int | None, cube: bool = False):
        def access(a: Access) -> str:
            if cube and kernel is not None and (kernel, a.tensor) in l0:
                return f"{a.tensor}_l0{kernel}[{_flat(a, l0[(kernel, a.tensor)][1], True)}]"
            if a.tensor in promoted:
                return f"{a.tensor}_local[{_flat(a, promoted[a.tensor], True)}]"
            if kernel is not None and (kernel, a.tensor) in staged:
                return f"{a.tensor}_s{kernel}[{_flat(a, staged[(kernel, a.tensor)], True)}]"
            return f"{a.tensor}[{_flat(a, k.tensors[a.tensor].shape, False)}]"
        return access

    blocked = {b.stmt: b for b in blocks.blocks}
    folded = {b.init: b for b in blocks.blocks}
    by_row = {r.stmt: r for r in rows.rows}
    for b in blocks.blocks:
        lines.append(f"static {accumulator_ctype(k.tensors[b.out].dtype)} {b.l0c()}[{math.prod(b.box)}];"
                     f"  /* L0C accumulator of kernel {b.plan}, box {list(b.box)} */")

    for s in k.statements:
        access = access_in(owner.get(s.name))
        if s.name in blocked:
            lines += _mmad_function(k, blocked[s.name], access_in(owner[s.name], cube=True))
            continue
        if s.name in by_row:
            lines += _vector_function(k, by_row[s.name], access)
            continue
        if s.name in folded:
            lines.append(f"#define {s.name}({', '.join(DIM + d for d in s.dim_names)}) do {{ }} while (0)"
                         f"  /* {s.text()}: folded into the first mmad of {folded[s.name].stmt} */")
            continue
        out_t = k.tensors[s.out.tensor]
        ctype = DTYPES[out_t.dtype][0]
        if s.kind == "init":
            rhs = _expr(s.body, k, access)   # the reduction's identity
        elif s.kind == "update":
            operand = access_in(owner.get(s.name), cube=s.is_cube)   # the cube reads its operands from L0A/L0B
            acc, body = f"(({_wide(out_t.dtype)}){access(s.out)})", _expr(s.body, k, operand)
            rhs = f"vmax({acc}, {body})" if s.combine == "max" else f"({acc} + {body})"
        else:
            rhs = _expr(s.body, k, access)
        lines.append(f"#define {s.name}({', '.join(DIM + d for d in s.dim_names)}) "
                     f"do {{ {access(s.out)} = ({ctype})({rhs}); }} while (0)  /* {s.text()} */")
    for (idx, name), box in staged.items():
        plan = next(p for p in c.plans if p.index == idx)
        dims = [f"a{i}" for i in range(len(box))]
        el = Access(name, tuple(Affine(((d, 1),)) for d in dims))
        local = f"{name}_s{idx}[{_flat(el, box, True)}]"
        glob = f"{name}[{_flat(el, k.tensors[name].shape, False)}]"
        params = ", ".join(DIM + d for d in dims)
        if name in plan.copy_in:
            lines.append(f"#define {copy_name('in', plan, name)}({params}) do {{ {local} = {glob}; }} while (0)")
        if name in plan.copy_out:
            lines.append(f"#define {copy_name('out', plan, name)}({params}) do {{ {glob} = {local}; }} while (0)")
    for (idx, name), (buf, box, stmt) in l0.items():
        dims = [f"a{i}" for i in range(len(box))]
        el = Access(name, tuple(Affine(((d, 1),)) for d in dims))
        lines.append(f"#define {stmt}({', '.join(DIM + d for d in dims)}) do {{ "
                     f"{name}_l0{idx}[{_flat(el, box, True)}] = {access_in(idx)(el)}; }} while (0)  /* L1 -> {buf} */")
    for b in blocks.blocks:
        dims = [f"a{i}" for i in range(len(b.box))]
        el = Access(b.out, tuple(Affine(((d, 1),)) for d in dims))
        ctype = DTYPES[k.tensors[b.out].dtype][0]
        lines.append(f"#define {b.drain}({', '.join(DIM + d for d in dims)}) do {{ "
                     f"{access_in(b.plan)(el)} = ({ctype}){b.l0c()}[{_flat(el, b.box, True)}]; "
                     f"accelmap_counts[1]++; }} while (0)"
                     f"  /* L0C -> UB */")
    lines.append("int accelmap_run(void **bufs, long long *dims) {")
    lines.append("  (void)dims;")
    for i, name in enumerate(args):
        lines.append(f"  {name} = ({DTYPES[k.tensors[name].dtype][0]} *)bufs[{i}];")
    defs = []
    for ef in flags:
        p, q = QUEUES.index(ef.flag.producer), QUEUES.index(ef.flag.consumer)
        defs.append(f"#define {ef.set_stmt}() set_flag({p}, {q})  /* {ef.flag.producer} -> {ef.flag.consumer}: "
                    f"after {ef.producer_instr} */")
        defs.append(f"#define {ef.wait_stmt}() wait_flag({p}, {q})  /* before {ef.consumer_instr} */")
    start = lines.index("int accelmap_run(void **bufs, long long *dims) {")
    lines[start:start + 1] = defs + [lines[start], "  accelmap_flag_errors = 0;",
                                     "  for (int p = 0; p < 25; p++) accelmap_flags[p / 5][p % 5] = 0;",
                                     "  for (int i = 0; i < 5; i++) accelmap_counts[i] = 0;"]
    lines += ["  " + ln for ln in ast_code(c, sched).splitlines()]
    # a wait that finds its flag not set (the emulation runs the queues in program order) is counted and returned
    lines += ["  return accelmap_flag_errors;", "}", ""]
    return "\n".join(lines), args


@dataclass
class RunResult:
    ok: bool
    max_abs_error: float
    exact: bool
    compile_s: float               # wall seconds of the host compiler
    run_s: float                   # wall seconds of the compiled code alone (the reference excluded)
    detail: str
    counts: dict[str, int] = field(default_factory=dict)   # issued by the C: mmad blocks, L0C elements drained,
    # flags, vector instructions and repeats


def run_and_check(c: Compiled, seed: int = 0) -> RunResult:
    """Compile the generated C, run it on random inputs, compare every global result with NumPy."""
    k = c.kernel
    src, args = generate_c(c)
    t0 = time.perf_counter()
    lib = compile_shared(src)
    fn = load_run(lib)
    t1 = time.perf_counter()
    inputs = random_inputs(k, seed)
    ref = reference(k, inputs)
    arrays = {}
    for name in args:
        t = k.tensors[name]
        host = "float32" if t.dtype == "float16" else DTYPES[t.dtype][2]
        arrays[name] = np.ascontiguousarray(inputs[name] if name in inputs else np.zeros(t.shape), dtype=host)
    ptrs = (ctypes.c_void_p * len(args))(*[a.ctypes.data for a in arrays.values()])
    dims = (ctypes.c_longlong * 1)(0)
    t1 = time.perf_counter()   # the run alone, without the NumPy reference
    flag_errors = fn(ptrs, dims)
    t2 = time.perf_counter()
    issued = (ctypes.c_longlong * 5).in_dll(ctypes.CDLL(str(lib)), "accelmap_counts")
    counts = {"mmad": int(issued[0]), "l0c_drained": int(issued[1]), "flags": int(issued[2]),
              "vector_instructions": int(issued[3]), "vector_repeats": int(issued[4])}
    worst, exact, bad = 0.0, True, []
    for t in k.live_out:
        got, want = arrays[t.name], ref[t.name]
        if is_float(t.dtype):
            g64, w64 = got.astype(np.float64), want.astype(np.float64)
            # NaN (a square root of a negative random input) must come out at the same places
            nan_g, nan_w = np.isnan(g64), np.isnan(w64)
            err = float(np.max(np.abs(g64 - w64)[~nan_w], initial=0.0)) if np.array_equal(nan_g, nan_w) \
                else float("inf")
            scale = float(np.max(np.abs(w64[~nan_w]), initial=1.0))
            tol = (1e-2 if t.dtype == "float16" else 1e-5) * max(1.0, scale)
            same = err <= tol
            exact = exact and bool(np.array_equal(got, want.astype(got.dtype), equal_nan=True))
        else:
            err = float(np.max(np.abs(got.astype(np.int64) - want.astype(np.int64)), initial=0))
            same = err == 0
            exact = exact and same
        worst = max(worst, err)
        if not same:
            bad.append(f"{t.name}: max |error| {err:g}")
    if flag_errors:
        bad.append(f"{flag_errors} wait_flag calls found their flag not set")
    detail = "; ".join(bad) if bad else ("bit-exact" if exact else f"within tolerance (max |error| {worst:.3g})")
    return RunResult(not bad, worst, exact, t1 - t0, t2 - t1, detail, counts)
