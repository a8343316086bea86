"""A kernel as isl objects: iteration domains, access relations, dependences, textual order."""

from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from accelmap.errors import SpecError
from accelmap.poly.kernel import Kernel


@dataclass(frozen=True)
class PolyProgram:
    kernel: Kernel
    ctx: isl.Context
    domain: isl.UnionSet
    reads: isl.UnionMap
    writes: isl.UnionMap
    order: isl.UnionMap          # the textual order (statement position, then its dims)
    raw: isl.UnionMap            # flow dependences (last writer -> reader)
    war_waw: isl.UnionMap        # anti and output dependences
    # memo of derived objects keyed by what they depend on (statement sets; per-kernel footprints at given tile
    # sizes): auto-tiling and cost-driven fusion ask for the same ones many times
    cache: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def deps(self) -> isl.UnionMap:
        return self.raw.union(self.war_waw)

    def stmt_set(self, names) -> isl.UnionSet:
        key = ("stmt_set", tuple(sorted(names)))
        if key not in self.cache:
            out = isl.UnionSet.empty(self.domain.get_space())
            for n in key[1]:
                out = out.union(isl.UnionSet("{ " + self.kernel.statement(n).domain_isl() + " }", context=self.ctx))
            self.cache[key] = out
        return self.cache[key]

    def writers_of(self, tensors) -> set[str]:
        return {s.name for s in self.kernel.statements if s.out.tensor in tensors}


def _map(text: str, ctx: isl.Context) -> isl.UnionMap:
    return isl.UnionMap(text, context=ctx)


def build_program(k: Kernel, ctx: isl.Context | None = None) -> PolyProgram:
    """isl domains and relations of ``k``; an access outside its tensor's shape is an error."""
    ctx = ctx or isl.Context()
    dom_parts, rd, wr, order = [], [], [], []
    depth = max(len(s.dims) for s in k.statements)
    tensors = k.tensors
    for pos, s in enumerate(k.statements):
        dom_parts.append(s.domain_isl())
        dims = ", ".join(s.dim_names)
        for a in s.reads:
            rd.append(f"{s.name}[{dims}] -> {a.tensor}[{', '.join(i.isl() for i in a.index)}]")
        wr.append(f"{s.name}[{dims}] -> {s.out.tensor}[{', '.join(i.isl() for i in s.out.index)}]")
        pad = [*s.dim_names, *["0"] * (depth - len(s.dims))]
        order.append(f"{s.name}[{dims}] -> [{pos}, {', '.join(pad)}]")
    domain = isl.UnionSet("{ " + "; ".join(dom_parts) + " }", context=ctx)
    reads = _map("{ " + "; ".join(rd) + " }", ctx).intersect_domain(domain)
    writes = _map("{ " + "; ".join(wr) + " }", ctx).intersect_domain(domain)
    for s in k.statements:
        for a in s.reads + [s.out]:
            t = tensors[a.tensor]
            box = isl.Set(f"{{ {t.name}[{', '.join(f'i{j}' for j in range(len(t.shape)))}] : "
                          + " and ".join(f"0 <= i{j} < {n}" for j, n in enumerate(t.shape)) + " }", context=ctx)
            acc = _map(f"{{ {s.name}[{', '.join(s.dim_names)}] -> {a.tensor}[{', '.join(i.isl() for i in a.index)}] }}",
                       ctx).intersect_domain(isl.UnionSet(f"{{ {s.domain_isl()} }}", context=ctx))
            outside = acc.range().subtract(isl.UnionSet.from_set(box))
            if not outside.is_empty():
                raise SpecError(f"statement {s.name} ({s.text()}) accesses {a} outside the shape "
                                f"{list(t.shape)} of {t.name}, e.g. at {outside.sample_point()}")
    for s in k.statements:
        if s.kind == "assign":
            w = writes.intersect_domain(isl.UnionSet(f"{{ {s.domain_isl()} }}", context=ctx))
            if not w.is_injective():
                raise SpecError(f"statement {s.name} ({s.text()}) writes some element of {s.out.tensor} twice; "
                                "an assignment must write each element once (use sum(...) to reduce)")
    order_map = _map("{ " + "; ".join(order) + " }", ctx).intersect_domain(domain)
    raw = (isl.UnionAccessInfo.from_sink(reads).set_must_source(writes).set_schedule_map(order_map)
           .compute_flow().get_may_dependence())
    war_waw = (isl.UnionAccessInfo.from_sink(writes).set_must_source(writes).set_may_source(reads)
               .set_schedule_map(order_map).compute_flow().get_may_dependence())
    return PolyProgram(k, ctx, domain, reads, writes, order_map, raw, war_waw)
