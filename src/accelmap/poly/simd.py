"""Sinking the fast dimension for the vector unit (AKG, PLDI 2021, Sec. 4.3; AKG's SinkLastAxis pass).

The vector unit processes a repeat of 8 blocks of 32 contiguous bytes. A vector statement fills its
blocks only when its innermost loop walks its dominant tensor (its output, or for a reduction the
operand it reduces) one element at a time along memory; otherwise each block carries one element
(the block stride cannot pack strided elements). ``sink_fast_dims`` permutes the members of a
permutable top-level band so that the member walking that contiguous dimension is the innermost one;
``contiguous_inner`` tells, per vector statement of a schedule, whether its innermost loop does.
Both decide "walks contiguously" exactly with isl: the elements touched at consecutive iterations of
the loop differ by +1 in the last axis and by 0 elsewhere.
"""

from __future__ import annotations

import islpy as isl

from accelmap.poly.kernel import Access, Statement
from accelmap.poly.program import PolyProgram
from accelmap.poly.schedule import group_nodes, is_type, statements_of


def dominant_access(st: Statement) -> Access:
    """The access whose layout the vector instruction follows: the output, or for a reduction step the first
    operand that is not the accumulator (a sum over the last axis reads that axis contiguously)."""
    if st.kind == "update":
        for a in st.reads:
            if a.tensor != st.out.tensor:
                return a
    return st.out


def _access_map(prog: PolyProgram, st: Statement) -> isl.Map:
    acc = dominant_access(st)
    rel = prog.reads if acc is not st.out else prog.writes
    space = isl.UnionSet(f"{{ {acc.tensor}[{', '.join(f'i{j}' for j in range(len(acc.index)))}] }}",
                         context=prog.ctx)
    found: list[isl.Map] = []
    rel.intersect_domain(prog.stmt_set([st.name])).intersect_range(space).foreach_map(found.append)
    (m,) = found
    return m


def contiguous_along(sched: isl.Map, access: isl.Map, pos: int) -> bool:
    """Whether consecutive values of schedule dimension ``pos`` (all others fixed) touch consecutive elements
    of the last axis of ``access``'s tensor (and the same elements on every other axis)."""
    n = sched.dim(isl.dim_type.out)
    t = [f"t{j}" for j in range(n)]
    nxt = [f"t{j} + 1" if j == pos else f"t{j}" for j in range(n)]
    step = isl.Map(f"{{ [{', '.join(t)}] -> [{', '.join(nxt)}] }}", context=sched.get_ctx())
    to_data = sched.reverse().apply_range(access)   # schedule point -> element
    pairs = to_data.reverse().apply_range(step).apply_range(to_data)
    rank = access.dim(isl.dim_type.out)
    if pairs.is_empty() or rank == 0:
        return False
    unit = isl.Set(f"{{ [{', '.join(['0'] * (rank - 1) + ['1'])}] }}", context=sched.get_ctx())
    return pairs.deltas().reset_tuple_id().is_equal(unit)


def _vector(prog: PolyProgram, names) -> list[Statement]:
    return [prog.kernel.statement(s) for s in names if not prog.kernel.statement(s).is_cube]


def sink_fast_dims(prog: PolyProgram, scheduled: isl.Schedule) -> isl.Schedule:
    """Make the contiguous member the innermost one in every permutable top-level band of vector statements
    that has no band below it (those loops are the innermost): the member must walk every vector statement
    of the band contiguously. A band already in that order, or with no such member, is left alone."""
    sched = scheduled
    for gi in range(len(group_nodes(sched))):
        node = group_nodes(sched)[gi]
        band = node.child(0) if is_type(node, isl.schedule_node_type.filter) and node.has_children() else node
        if not is_type(band, isl.schedule_node_type.band) or not band.band_get_permutable():
            continue
        n = band.band_n_member()
        if n < 2 or _has_band_below(band):
            continue
        stmts = _vector(prog, statements_of(band.get_domain()))
        if not stmts or len(stmts) != len(statements_of(band.get_domain())):
            continue   # cube statements keep the scheduler's order (the fractal loops are their own)
        part = band.band_get_partial_schedule_union_map()
        fast = [i for i in range(n) if all(
            contiguous_along(_one(part.intersect_domain(prog.stmt_set([st.name]))), _access_map(prog, st), i)
            for st in stmts if st.kind != "init")]
        if not fast or fast[-1] == n - 1:
            continue
        j = fast[-1]
        mupa = band.band_get_partial_schedule()
        order = [i for i in range(n) if i != j] + [j]
        coincident = [bool(band.band_member_get_coincident(i)) for i in order]
        upas = isl.UnionPwAffList.alloc(prog.ctx, n)
        for i in order:
            upas = upas.add(mupa.get_at(i))
        space = mupa.get_space()
        permuted = isl.MultiUnionPwAff.from_union_pw_aff_list(space, upas)
        new = band.delete().insert_partial_schedule(permuted).band_set_permutable(1)
        for i, c in enumerate(coincident):
            new = new.band_member_set_coincident(i, int(c))
        sched = new.get_schedule()
    return sched


def _has_band_below(node: isl.ScheduleNode) -> bool:
    for i in range(node.n_children()):
        c = node.child(i)
        if is_type(c, isl.schedule_node_type.band) or _has_band_below(c):
            return True
    return False


def _one(u: isl.UnionMap) -> isl.Map:
    found: list[isl.Map] = []
    u.foreach_map(found.append)
    (m,) = found
    return m


def contiguous_inner(prog: PolyProgram, scheduled: isl.Schedule) -> dict[str, bool]:
    """Per vector statement: whether its innermost loop (the last schedule dimension that varies over its
    instances) walks its dominant tensor contiguously. Tiling and intra-tile distribution keep the members'
    order, so this holds inside the tiles too."""
    full = scheduled.get_map()
    out: dict[str, bool] = {}
    for st in _vector(prog, [s.name for s in prog.kernel.statements]):
        if not st.dims:
            out[st.name] = True   # a single element
            continue
        m = _one(full.intersect_domain(prog.stmt_set([st.name])))
        rng = m.range()
        varying = [j for j in range(m.dim(isl.dim_type.out))
                   if not rng.dim_max_val(j).eq(rng.dim_min_val(j))]
        out[st.name] = bool(varying) and contiguous_along(m, _access_map(prog, st), varying[-1])
    return out


def inner_dims(prog: PolyProgram, scheduled: isl.Schedule) -> dict[str, str]:
    """Per vector statement whose innermost loop walks its dominant tensor contiguously: the statement dim that
    loop steps by one (x -> x + e_d moves the schedule by one in that loop only). The vector unit's rows run
    along it: the timing model charges repeats per row and the code issues one instruction per row."""
    full = scheduled.get_map()
    contiguous = contiguous_inner(prog, scheduled)
    out: dict[str, str] = {}
    for st in _vector(prog, [s.name for s in prog.kernel.statements]):
        if not st.dims or not contiguous.get(st.name):
            continue
        m = _one(full.intersect_domain(prog.stmt_set([st.name])))
        rng = m.range()
        n = m.dim(isl.dim_type.out)
        varying = [j for j in range(n) if not rng.dim_max_val(j).eq(rng.dim_min_val(j))]
        unit = isl.Set(f"{{ [{', '.join('1' if j == varying[-1] else '0' for j in range(n))}] }}", context=prog.ctx)
        dom = m.domain()
        for d in st.dim_names:
            names = st.dim_names
            step = isl.Map(f"{{ {st.name}[{', '.join(names)}] -> {st.name}[{', '.join(f'{x} + 1' if x == d else x for x in names)}] }}",
                           context=prog.ctx).intersect_domain(dom).intersect_range(dom)
            if step.is_empty():
                continue
            if step.apply_domain(m).apply_range(m).deltas().reset_tuple_id().is_equal(unit):
                out[st.name] = d
                break
    return out
