"""Costs of an embedding: intrinsic calls, layout-transformation bytes, memory, modelled latency.

The latency comes from ``accelmap.cost.evaluate`` on the intrinsic program
written as an operator: the outer loops plus the intrinsic's own dimensions,
each operand indexed in its packed layout. Two mappings of that operator:

* ``latency``: built here in microseconds, used to rank every embedding:
  intrinsic dimensions go on the fan-out axes they fit, the other intrinsic
  dimensions run innermost in the on-chip level, and outer loops move on chip
  innermost-first while the tiles fit the buffers (``accelmap.mapping.validate``);
* ``mapped_latency``: the mapper (``accelmap.search.map_operator``, objective
  latency) with the intrinsic dimensions pinned to the same fan-out axes, so
  the program still issues whole intrinsic calls; about a second per program,
  so ``embed`` applies it to the best few only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.model import check_countable, evaluate
from accelmap.embed.program import Program
from accelmap.errors import AccelmapError, SpecError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.validate import validate
from accelmap.search.mapper import map_operator
from accelmap.search.space import Constraints
from accelmap.workload.operator import Operator, make_operand


@dataclass(frozen=True)
class Costs:
    calls: int
    utilization: float              # operator MACs / MACs issued (padding waste included)
    transform_bytes: int            # runtime layout traffic: data in, result out (read + write)
    weight_transform_bytes: int     # done once, ahead of time
    data_bytes: int                 # packed input data
    weight_bytes: int               # packed weights
    output_bytes: int               # packed output
    latency: float | None           # modelled cycles of the intrinsic program on the accelerator
    transform_cycles: float         # runtime layout traffic over the off-chip bandwidth
    mapped_latency: float | None = None   # with the mapper's loop nest, when it was asked for

    @property
    def operator_cost(self) -> float:
        for lat in (self.mapped_latency, self.latency):
            if lat is not None:
                return lat
        return float(self.calls)

    @property
    def combined_cost(self) -> float:
        return self.operator_cost + self.transform_cycles

    @property
    def memory_bytes(self) -> int:
        return self.data_bytes + self.weight_bytes + self.output_bytes

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d.update(operator_cost=self.operator_cost, combined_cost=self.combined_cost, memory_bytes=self.memory_bytes)
        return d


def program_operator(prog: Program) -> Operator:
    """The intrinsic program as an operator over (outer loops + intrinsic dims)."""
    intr = prog.intrinsic
    sizes = dict(prog.loops)
    ren = {d: f"i_{d}" for d, _ in intr.dims}
    sizes.update({ren[d]: s for d, s in intr.dims})
    used = set()
    ops = []
    for lay in prog.layouts:
        io = intr.operand(lay.intrinsic_operand)
        idx = [a.loop_terms() for a in lay.outer if a.loop_terms()]
        idx += [((ren[ix.dims[0]], 1),) for ix in io.indices]
        o = prog.op.operand(lay.operand)
        ops.append(make_operand(o.name, idx, o.role, o.bits, o.cls))
        used |= {d for t in idx for d, _ in t}
    dims = tuple((d, s) for d, s in sizes.items() if d in used)
    return Operator(f"{prog.op.name}@{intr.name}", dims, tuple(ops), kind="intrinsic_program")


def _mapping(pop: Operator, prog: Program, arch: Accelerator) -> Mapping | None:
    intr_dims = [d for d in pop.dim_names if d.startswith("i_")]
    outer = [d for d, _ in prog.loops if d in pop.sizes]
    axes = arch.fanout_axes()
    inner = len(arch.levels) - 1
    spatial, temporal_in = [], []
    free = dict(axes)
    for d in intr_dims:
        n = pop.sizes[d]
        if n == 1:
            continue
        red = d[2:] not in prog.intrinsic.output.dims
        fit = [a for a, (lvl, ax) in free.items() if lvl == inner and ax.size >= n and (ax.reduce or not red)]
        if fit:
            spatial.append(Loop(d, n, inner, fit[0]))
            del free[fit[0]]
        else:
            temporal_in.append(Loop(d, n, inner))
    keep = tuple(frozenset(o.name for o in pop.operands if o.cls in lv.holds) for lv in arch.levels)
    on_chip: list[str] = []
    best = None
    for k in range(len(outer) + 1):
        cand_on = outer[len(outer) - k:]
        loops = [Loop(d, pop.sizes[d], 0) for d in outer[:len(outer) - k]]
        loops += [Loop(d, pop.sizes[d], inner) for d in cand_on] + temporal_in + spatial
        m = Mapping(tuple(loops), keep)
        try:
            validate(pop, arch, m)
        except AccelmapError:
            break
        best = m
        on_chip = cand_on
    del on_chip
    return best


def program_mapping(prog: Program, arch: Accelerator) -> tuple[Operator, Mapping] | None:
    """The program as an operator with the loop nest ``latency`` models (None where ``latency`` is None)."""
    pop = program_operator(prog)
    try:
        check_countable(pop)
    except SpecError:
        return None
    m = _mapping(pop, prog, arch)
    return None if m is None else (pop, m)


def latency(prog: Program, arch: Accelerator) -> float | None:
    """Modelled cycles of the program on ``arch``; None when the arch cannot run the intrinsic's precision
    or the program is too large for the cost model's counts."""
    pm = program_mapping(prog, arch)
    return None if pm is None else float(evaluate(pm[0], arch, pm[1]).latency)


def intrinsic_constraints(prog: Program, arch: Accelerator) -> tuple[Operator, Mapping, Constraints] | None:
    """The program as an operator, the loop nest ``latency`` builds, and the constraint that keeps every
    intrinsic dim whole on the PE array as that nest places it (a mapping under it calls the intrinsic as the
    program does). None when the built nest runs an intrinsic dim temporally (the mapper could then tile it,
    which breaks the intrinsic call), the arch cannot run it or the program is too large to count."""
    pop = program_operator(prog)
    try:
        check_countable(pop)
    except SpecError:
        return None
    m = _mapping(pop, prog, arch)
    if m is None:
        return None
    spatial: dict[str, dict[str, int]] = {}
    for lp in m.loops:
        if lp.axis is not None:
            spatial.setdefault(lp.axis, {})[lp.dim] = lp.bound
    pinned = {d for dims in spatial.values() for d in dims}
    if any(d.startswith("i_") and n > 1 and d not in pinned for d, n in pop.dims):
        return None
    return pop, m, Constraints(spatial=spatial)


def mapped_latency(prog: Program, arch: Accelerator, time_limit: float = 10.0) -> float | None:
    """Modelled cycles with the mapper's loop nest (or the built one, when that is better).

    None when the intrinsic does not fit the fan-out (an intrinsic dim would run temporally,
    and the mapper could then tile it, which breaks the intrinsic call), the arch cannot run it or the
    program is too large for the cost model's counts.
    """
    got = intrinsic_constraints(prog, arch)
    if got is None:
        return None
    pop, m, cons = got
    built = float(evaluate(pop, arch, m).latency)
    try:
        res = map_operator(pop, arch, "latency", constraints=cons, strategy="heuristic", time_limit=time_limit)
    except AccelmapError:
        return built
    return min(built, float(res.best.result.latency)) if res.best else built


def costs(prog: Program, arch: Accelerator | None = None) -> Costs:
    tb = wtb = data = wts = outb = 0
    for lay in prog.layouts:
        moved = lay.bytes(lay.stored) + lay.bytes(lay.packed) if lay.transformed else 0
        size = lay.bytes(lay.packed)
        o = prog.op.operand(lay.operand)
        if o.cls == "W":
            wtb += moved
            wts += size
        elif o.is_output:
            tb += moved
            outb += size
        else:
            tb += moved
            data += size
    lat = latency(prog, arch) if arch is not None else None
    bw = 8.0
    if arch is not None and arch.levels[0].read_bw_bits:
        bw = arch.levels[0].read_bw_bits / 8
    return Costs(prog.calls, prog.utilization, tb, wtb, data, wts, outb, lat, tb / bw)


def geomean(values: list[float]) -> float:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")
