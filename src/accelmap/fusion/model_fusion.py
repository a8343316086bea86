"""Fuse a mapped model: its chains cut into groups on top of the layer-by-layer mapping.

The layer-by-layer mapping (``map_model``) gives every operator alone; this module finds the model's
chains in its ONNX graph, searches each chain's plans (``fusion.search``) with tile mappings found
by the single-operator mapper, and picks the best total for the objective. Layers outside chains,
and failed layers (which cut a chain), keep their layer-by-layer cost.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.latency import shared_port_crossings
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError, SpecError
from accelmap.fusion.chain import FusableChain, fusable_chains, span_residual_blocks
from accelmap.fusion.group_cost import (
    GroupCost,
    InnerMappings,
    Producer,
    fmap_bits,
    offchip_bits,
    shared_port_bandwidth,
    store_index,
)
from accelmap.fusion.search import (
    DEFAULT_FUSION,
    FusionConfig,
    Point,
    SearchLog,
    Single,
    chain_front,
    combine,
    joins_alone,
    norms_alone,
)
from accelmap.mapping.loopnest import Mapping
from accelmap.search.heuristic_config import HeuristicConfig
from accelmap.search.mapper import map_operator
from accelmap.search.model_result import ModelMapping
from accelmap.search.objective import certificate_gap
from accelmap.workload.models.chains import ChainLink, model_chains
from accelmap.workload.operator import Operator

# The tiles' searches: the heuristic with fewer probes and climbs than a whole layer's (a tile loop
# has many tiles to map, each much smaller than a layer).
TILE_HEURISTIC = HeuristicConfig(max_probes=8, full_searches=1, bypass_choices=1, rows_per_level=500,
                                 random_tilings=200, climbs=2, climb_steps=20, exact_candidates=2,
                                 orders_per_candidate=2)


def tile_key(op: Operator) -> tuple:
    """An operator's computation without its tensors' stored shapes and padding, as a tile operator has it
    (``stages.tile_operator``): a tile of all of a layer's output has its layer's key."""
    return replace(op, operands=tuple(replace(o, shape=(), pad_lo=()) for o in op.operands)).signature()


def layer_warm_starts(mm: ModelMapping) -> dict[tuple, tuple[Mapping, ...]]:
    """The layer-by-layer mappings by ``tile_key``: warm starts of the tile searches whose tile is a whole layer."""
    out: dict[tuple, tuple[Mapping, ...]] = {}
    for lm in mm.layers:
        if lm.mapping is not None:
            k = tile_key(lm.layer.operator)
            out[k] = out.get(k, ()) + (lm.mapping,)
    return out


def mapper_search(objective: str, time_limit: float, config: HeuristicConfig = TILE_HEURISTIC, seed: int = 0,
                  warm: dict[tuple, tuple[Mapping, ...]] | None = None):
    """The single-operator mapper as the search of a tile's mapping. ``warm`` (``layer_warm_starts``): mappings
    by ``tile_key``, each a candidate of the tile operator with that key where valid on the reduced accelerator
    (a tile of a whole layer starts from that layer's own mapping, which the fused group then never maps worse)."""
    goal = "edp" if objective == "pareto" else objective

    def search(op: Operator, arch: Accelerator) -> Mapping:
        # No certified bound: the fusion search uses only the mapping, and the bound can cost more than the search
        # (tens of CPU seconds and GB on a 128x128 array).
        res = map_operator(op, arch, goal, strategy="heuristic", time_limit=time_limit, seed=seed,
                           heuristic_config=config, lower_bound=False,
                           warm_start=warm.get(tile_key(op), ()) if warm else ())
        if res.best is None:
            raise MappingError(f"no mapping of {op.name} found within {time_limit:g} s")
        return res.best.mapping
    return search


@dataclass(frozen=True)
class FusedModel:
    objective: str
    chains: tuple[FusableChain, ...]
    best: Point                               # the chosen plan's totals and its fused groups
    unfused: Point                            # layer by layer
    layer_offchip: tuple[tuple[str, int, int], ...]   # node, unfused bits, fused bits (one occurrence)
    layer_fmap: tuple[tuple[str, int, int], ...]      # the same for the feature maps only (no weights)
    stats: SearchLog
    tile_searches: int
    seconds: float
    notes: tuple[str, ...] = field(default=())
    time_limit: float | None = None           # of the fusion search as a whole (None: none)
    tile_time_limit: float | None = None      # of each tile mapping's search
    # Exact tile search: "optimal" (every candidate costed or pruned by its bound), "best found"
    # (with lower_bound and gap), or "not exact" (tiles limited to halves); None without it.
    certificate: str | None = None
    lower_bound: float | None = None          # of the objective, over the whole space searched
    joins: tuple[str, ...] = ()               # the residual adds after chains (charged in both plans)
    span_residuals: bool = False              # groups may span residual blocks (``FusionConfig.span_residuals``)
    norms: tuple[str, ...] = ()               # the normalizations inside chains (charged in both plans)
    shared_offchip_port: bool = False         # one off-chip port for reads and writes (``FusionConfig``)

    @property
    def gap(self) -> float | None:
        if self.certificate is None:
            return None
        return certificate_gap(self.best.objective(self.objective), self.lower_bound, self.certificate == "optimal")

    @property
    def groups(self) -> tuple[GroupCost, ...]:
        return tuple(c for c in self.best.choices if isinstance(c, GroupCost))

    def to_dict(self) -> dict[str, Any]:
        def pt(p: Point) -> dict[str, float]:
            return {"energy_pj": p.energy, "latency_cycles": p.latency, "edp": p.energy * p.latency,
                    "offchip_bits": p.offchip_bits}
        return {"objective": self.objective, "fused": pt(self.best), "unfused": pt(self.unfused),
                "chains": [list(c.nodes) for c in self.chains],
                "joins": list(self.joins), "normalizations": list(self.norms),
                "groups": [{"stages": list(g.names), "tile": [g.tile_rows, g.tile_cols], "tiles": g.counts.tiles,
                            "weights_resident": g.weights_resident,
                            "producers_on_chip": list(g.producers_on_chip), "head_tile": g.head_tile,
                            "input_read_in_store_by": list(g.input_readers), "input_held": g.input_held,
                            "spans_residual_blocks": bool(g.inner_joins),
                            "inner_joins": [{"add": j.name, "skip": sp} for j, sp in g.inner_joins],
                            "join": None if g.join is None else {"add": g.join.name, "skip": g.skip_policy,
                                                                 "skip_offchip_bits": g.counts.skip_fetched
                                                                 * g.join.bits},
                            "policies": dict(zip(["input", *g.names[:-1]], g.policies, strict=True)),
                            "buffer_bits": g.counts.buffer_total_bits, "reserved_bits": g.reserved_bits,
                            "energy_pj": g.energy, "latency_cycles": g.latency, "offchip_bits": g.offchip_bits,
                            "fmap_bits": g.fmap_bits,
                            "macs_computed": list(g.counts.macs)} for g in self.groups],
                "layers": [{"node": n, "offchip_bits_unfused": u, "offchip_bits_fused": f,
                            "fmap_bits_unfused": fu, "fmap_bits_fused": ff}
                           for (n, u, f), (_, fu, ff) in zip(self.layer_offchip, self.layer_fmap, strict=True)],
                "search": {"groups_tried": self.stats.groups_tried, "candidates_costed": self.stats.candidates_costed,
                           "candidates_rejected": self.stats.candidates_rejected,
                           "tile_searches": self.tile_searches, "seconds": self.seconds,
                           "time_limit_s": self.time_limit, "tile_time_limit_s": self.tile_time_limit,
                           "timed_out": self.stats.timed_out, "groups_skipped": self.stats.groups_skipped,
                           "span_residuals": self.span_residuals, "shared_offchip_port": self.shared_offchip_port,
                           "exact_tiles": self.certificate is not None, "certificate": self.certificate,
                           "lower_bound": self.lower_bound, "gap": self.gap,
                           "candidates_pruned": self.stats.candidates_pruned,
                           "candidates_unresolved": self.stats.candidates_unresolved,
                           "inexact_groups": self.stats.inexact_groups, "fronts_thinned": self.stats.fronts_thinned},
                "notes": list(self.notes)}


def _cut_at_failures(links: tuple[ChainLink, ...], ok: set[str]) -> list[tuple[ChainLink, ...]]:
    out, run = [], []
    for link in links:
        if link.node in ok:
            run.append(link)
        else:
            out.append(tuple(run))
            run = []
    out.append(tuple(run))
    return [r for r in out if len(r) >= 2]


def model_producers(mm: ModelMapping, chains: tuple[FusableChain, ...] | list[FusableChain]) -> dict[str, Producer]:
    """Operators outside every chain whose whole output is a chain operator's second operand (attention's K and V
    projections), with their layer-by-layer mappings and costs, by node."""
    in_any = {n for c in chains for n in c.nodes}
    layer_of = {n: (lm.layer.operator, lm.mapping, lm.result) for lm in mm.layers for n in lm.layer.nodes
                if lm.result is not None and lm.mapping is not None}
    return {p: Producer(p, replace(op, name=p), m, r)
            for c in chains for p in c.producers if p is not None and p in layer_of and p not in in_any
            for op, m, r in (layer_of[p],) if m is not None and r is not None}


def fuse_model(mm: ModelMapping, *, objective: str | None = None, config: FusionConfig = DEFAULT_FUSION,
               tile_time_limit: float = 2.0, time_limit: float | None = None,
               inner: InnerMappings | None = None) -> FusedModel:
    """Fuse the chains of ``mm``'s model on ``mm``'s accelerator; never worse than ``mm`` itself.

    ``tile_time_limit`` bounds each tile mapping's search; ``time_limit`` the fusion search as a
    whole: past it no further group is tried (a tile search already started finishes, so the search
    may overrun it by up to ``tile_time_limit``), and the result says so (``stats.timed_out``).
    """
    for what, v in (("tile_time_limit", tile_time_limit), ("time_limit", time_limit)):
        if v is not None and not (0 < v < math.inf):
            raise SpecError(f"must be positive, finite seconds, got {v}", where=what)
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    arch = mm.arch
    goal = objective or mm.objective
    store_index(arch)                       # refuse an accelerator without a store, with the reason
    top = arch.levels[0].name
    if arch.levels[0].shared_port:
        config = replace(config, shared_offchip_port=True)     # the machine's own off-chip port is one
    port_bw = shared_port_bandwidth(arch.levels[0]) if config.shared_offchip_port else None
    # One port on a machine described with two: a layer alone is timed on the machine with that port (its reads and
    # writes taking turns).
    port_arch = None
    if port_bw and not arch.levels[0].shared_port:
        port_arch = replace(arch, levels=(replace(arch.levels[0], shared_port=True),) + arch.levels[1:])
    operators: dict[str, Operator] = {}
    singles: dict[str, Single] = {}
    both_ways: list[str] = []       # layers alone moving a double buffer's inputs and output through the one port
    base_e = base_l = 0.0
    base_off = 0
    for lm in mm.layers:
        if lm.result is None:
            continue
        lat = lm.result.latency
        off = offchip_bits(lm.layer.operator, lm.result, top)
        if port_arch is not None and lm.mapping is not None:
            lat = evaluate(lm.layer.operator, port_arch, lm.mapping, check=False).latency
        timed_on = port_arch if port_arch is not None else arch
        if timed_on.levels[0].shared_port and lm.mapping is not None and \
                shared_port_crossings(lm.layer.operator, timed_on, lm.mapping) == {"input", "output"}:
            both_ways.append(lm.layer.name)
        for node in lm.layer.nodes:
            singles[node] = Single(node, lm.result.energy_total, lat, off, fmap_bits(lm.layer.operator, lm.result, top))
        base_e += lm.result.energy_total * lm.count
        base_l += lat * lm.count
        base_off += off * lm.count
    for lm in mm.layers:
        for node in lm.layer.nodes:
            operators[node] = lm.layer.operator
    unfused = Point(base_e, base_l, base_off, ())
    notes: list[str] = []
    if port_bw:
        notes.append("one off-chip port for reads and writes: fused groups, host passes and layers alone share it; "
                     "a layer alone is its mapping's schedule with its reads and writes taking turns on the port")
    if both_ways:
        notes.append(f"{len(both_ways)} layer(s) alone ({', '.join(both_ways)}) move both inputs and the output of a "
                     "double-buffered level through the one off-chip port: there the latency model can be below the "
                     "simulator's schedule (it counts that level's loads, not its drains, against each other on the "
                     "port)")
    source = Path(mm.model.source)
    links: list[tuple[ChainLink, ...]] = []
    if source.suffix == ".onnx" and source.exists():
        links = model_chains(source, set(operators))
    else:
        notes.append("no ONNX graph, so no chains: every layer runs alone")
    chains = [c for ls in links for run in _cut_at_failures(ls, set(singles)) for c in fusable_chains(run, operators)]
    if config.span_residuals:
        chains = span_residual_blocks(chains)
    if any(lm.count > 1 and any(n in c.nodes for c in chains for n in lm.layer.nodes) for lm in mm.layers):
        notes.append("a layer that occurs several times is fused per occurrence (chain by chain)")
    # A residual add after a chain reads its skip tensor: charged in both plans (alone, or in a group).
    joins = [j for c in chains for j in joins_alone(c, arch).values()]
    # A normalization between two operators of a chain (attention's softmax) reads and writes off-chip memory
    # when run alone: charged in both plans too (alone, or applied inside a group).
    norms = [x for c in chains for ns in norms_alone(c, arch, config.shared_offchip_port).values() for x in ns]
    for j in joins + norms:
        singles[j.node] = j
    alone = joins + norms
    unfused = Point(base_e + sum(j.energy for j in alone), base_l + sum(j.latency for j in alone),
                    base_off + sum(j.offchip_bits for j in alone), ())
    inner = inner or InnerMappings(mapper_search(goal, tile_time_limit))
    stats = SearchLog()
    bound_fronts: list[list[Point]] = [[] for _ in chains]
    # Operators outside every chain whose whole output is a chain operator's second operand (attention's K and V
    # projections): a group keeping its weights resident may run them just before it, their outputs in the store.
    producers = model_producers(mm, chains) if config.producers_on_chip else {}
    fronts = [chain_front(c, singles, arch, inner, config, stats, deadline, bf, producers)
              for c, bf in zip(chains, bound_fronts, strict=True)]
    in_chains = [n for c in chains for n in c.nodes] + [j.node for j in alone]
    rest = Point(unfused.energy - sum(singles[n].energy for n in in_chains),
                 unfused.latency - sum(singles[n].latency for n in in_chains),
                 unfused.offchip_bits - sum(singles[n].offchip_bits for n in in_chains), ())
    best = combine(rest, fronts, goal, config.front_limit, stats) if chains else unfused
    if best.objective(goal) > unfused.objective(goal):
        best = Point(unfused.energy, unfused.latency, unfused.offchip_bits,
                     tuple(singles[n] for n in in_chains))
    certificate = lower = None
    if config.exact_tiles:
        lower = combine(rest, bound_fronts, goal, config.front_limit).objective(goal) if chains else \
            unfused.objective(goal)
        lower = min(lower, best.objective(goal))
        if stats.inexact_groups or stats.fronts_thinned:
            certificate = "not exact"
        elif stats.candidates_unresolved or stats.groups_skipped or stats.timed_out:
            certificate = "best found"
        else:
            certificate = "optimal"
    fused_bits: dict[str, tuple[int, int]] = {}
    for c in best.choices:
        if isinstance(c, Single):
            fused_bits[c.node] = (c.offchip_bits, c.fmap_bits)
        else:
            for st in c.stages + ((c.join_cost,) if c.join_cost else ()) + c.inner_join_costs:
                if st.name in operators or st.name in singles:
                    fused_bits[st.name] = (st.offchip_bits, st.fmap_bits)
    for x in norms:
        fused_bits.setdefault(x.node, (0, 0))      # not run alone: applied inside a group, on chip
    layer_off = tuple((n, s.offchip_bits, fused_bits.get(n, (s.offchip_bits, 0))[0]) for n, s in singles.items())
    layer_fmap = tuple((n, s.fmap_bits, fused_bits.get(n, (0, s.fmap_bits))[1]) for n, s in singles.items())
    if stats.timed_out:
        notes.append(f"the fusion search stopped at its time limit of {time_limit:g} s with {stats.groups_skipped} "
                     "groups not (fully) tried: the plan is the best over the groups tried, not over all")
    if norms:
        notes.append(f"the {len(norms)} normalizations between operators of a chain ({', '.join(n.node for n in norms)}) "
                     "read and write off-chip memory when run alone (charged in the layer-by-layer totals here, "
                     "unlike `accelmap map` without --fuse) or apply inside a fused group")
    if joins:
        notes.append(f"the {len(joins)} residual adds after chains read their skip tensor from off-chip memory when "
                     "run alone (charged in the layer-by-layer totals here, unlike `accelmap map` without --fuse) "
                     "or kept on chip by a fused group")
    return FusedModel(goal, tuple(chains), best, unfused, layer_off, layer_fmap, stats, inner.searched,
                      time.perf_counter() - t0, tuple(notes), time_limit, tile_time_limit, certificate, lower,
                      tuple(j.node for j in joins), config.span_residuals, tuple(n.node for n in norms),
                      config.shared_offchip_port)
