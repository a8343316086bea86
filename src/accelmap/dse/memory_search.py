"""Memory-configuration co-search after Sunstone-arch (Ng's 2022 UBC thesis, Ch. 5 and 7, Algorithm 9).

The question of the thesis' Chapter 7: per-tensor L1 buffers of a PE (ifmap, weight, ofmap),
each from a set of sizes, under an area budget; which sizes and which mapping give the lowest
EDP for a layer? The baseline maps every configuration within the budget (a grid). The
co-search reaches the same answer mapping fewer of them, by four rules (docs/dse.md argues each):

- B (budget): only configurations whose buffers fit the area budget exist, as in the grid.
- H (hierarchical bound, the thesis' bin pruning): every configuration gets a certified lower
  bound of its objective before any mapping (``search.spatial.certified_lower_bound``, the bound
  the mapper itself proves optimality with, with this configuration's energies); they are visited
  in ascending bound, and the search stops at the first whose bound is not below the best value
  found, since no mapping of it or of any later one can be better.
- C (capacity): the bound of H is raised where the buffers' capacities force more traffic between the
  PEs and the shared levels than H charges (``capacity_bound``, a red-blue pebble bound); certified.
- S (smallest memory, the thesis' Observation 6): a mapping found for one configuration holds
  the same tiles in the smallest configuration whose buffers fit them, where every access costs
  no more; it is re-priced there (one evaluation), which gives that configuration an incumbent
  and marks the first one dominated when they differ. A configuration whose incumbent already
  meets its lower bound is proven without mapping it.

An opt-in fourth rule, T (tile dominance, the thesis' Observation 4 with Observation 6), drops every
configuration that is not the smallest memory of some maximal tile before any mapping. It is *not*
certified under this cost model (docs/dse.md says why) and is off unless asked for.

A split L1 is written as one level per operand class with no fan-out between them (an operand
passes through levels that do not hold it at no cost), so each buffer has its own energy per
access, priced by CACTI for its size (``dse.design.derive``).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, TypeVar

from accelmap.arch import accelerator_from_dict
from accelmap.arch.accelerator import Accelerator
from accelmap.cost.model import evaluate
from accelmap.dse import components
from accelmap.dse.capacity_bound import capacity_energy_bound
from accelmap.dse.design import derive
from accelmap.dse.fill_stall_bound import fill_stall_bound
from accelmap.dse.root_bound import beaten_by_root_bounds, root_lower_bound
from accelmap.errors import AccelmapError
from accelmap.mapping.loopnest import Mapping
from accelmap.mapping.validate import capacity_usage
from accelmap.search.bounds import chain_options
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import certified_lower_bound
from accelmap.workload.index_sets import tile_size
from accelmap.workload.operator import Operator

Config = tuple[int, ...]                 # words of each searched level, in the order of ``levels``
# (objective value, mapping) of the best mapping found on a configuration; None: none found.
# With ``co_search(..., warm_start=True)`` it also takes the mappings to start from.
MapConfig = Callable[..., tuple[float, Mapping] | None]
_TOLERANCE = 1e-9

def split_l1_base() -> Accelerator:
    """The machine of the thesis' Table 7.1 L1-split study (Ng's Sunstone thesis, Ch. 7): a 16 x 16 array under a
    128 KiB L2, one L1 per operand (128 words each, the size the co-search sweeps), 16-bit words."""
    levels = [{"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "16 bit",
               "read_bandwidth": "16 words/cycle"},
              {"name": "L2", "holds": ["I", "W", "O"], "capacity": "128 KiB", "width": "16 bit",
               "read_bandwidth": "16 words/cycle",
               "fanout": {"axes": [{"name": "X", "size": 16}, {"name": "Y", "size": 16}]}}]
    levels += [{"name": f"L1{c}", "holds": [c], "capacity": "128 words", "width": "16 bit"} for c in "IWO"]
    return accelerator_from_dict({"name": "sunstone_16x16", "compute": {
        "mac_energy": "1 pJ", "precision": {"I": 16, "W": 16, "O": 16}}, "levels": levels}, "Ng's thesis, Ch. 7")



def config_arch(base: Accelerator, levels: tuple[str, ...], words: Config) -> Accelerator:
    """``base`` with each of ``levels`` holding ``words`` words, energies derived for those sizes."""
    lv = list(base.levels)
    for name, w in zip(levels, words, strict=True):
        i = base.level_index(name)
        lv[i] = replace(lv[i], capacity_bits=w * lv[i].width_bits, partitions=())
    label = ",".join(f"{n}={w}" for n, w in zip(levels, words, strict=True))
    return derive(replace(base, levels=tuple(lv), name=f"{base.name}[{label}]"))[0]


def buffer_area_um2(base: Accelerator, levels: tuple[str, ...], words: Config) -> float:
    """Area of one instance of the searched buffers (one SRAM each)."""
    return sum(components.sram(w * base.level(n).width_bits, base.level(n).width_bits)[2]
               for n, w in zip(levels, words, strict=True))


def configs_within(base: Accelerator, levels: tuple[str, ...], choices: tuple[int, ...],
                   max_area_um2: float) -> list[Config]:
    """Rule B: every choice of sizes whose buffers fit the area budget."""
    return [c for c in itertools.product(choices, repeat=len(levels))
            if buffer_area_um2(base, levels, c) <= max_area_um2 * (1 + _TOLERANCE)]


Choices = tuple[int, ...] | tuple[tuple[int, ...], ...]   # one set of words for every level, or one per level


def per_level(choices: Choices, n: int) -> tuple[tuple[int, ...], ...]:
    """The choices of each of ``n`` levels."""
    flat = tuple(c for c in choices if isinstance(c, int))
    if len(flat) == len(choices):
        return tuple(flat for _ in range(n))
    return tuple(tuple(c) for c in choices if not isinstance(c, int))


def smallest_config(op: Operator, arch: Accelerator, m: Mapping, levels: tuple[str, ...],
                    choices: Choices) -> Config | None:
    """The smallest size per searched level that holds the mapping's tiles (None: none does)."""
    use = capacity_usage(op, arch, m)
    out = []
    for name, level_choices in zip(levels, per_level(choices, len(levels)), strict=True):
        i = arch.level_index(name)
        need = sum(use[i].values())
        width = arch.levels[i].width_bits
        fit = [w for w in sorted(level_choices) if w * width >= need]
        if not fit:
            return None
        out.append(fit[0])
    return tuple(out)


@dataclass
class MemorySearch:
    best: Config | None = None
    value: float = float("inf")
    mapping: Mapping | None = None
    configs: int = 0                              # within the budget
    mapped: list[Config] = field(default_factory=list)      # configurations the mapper ran on, in order
    pruned_by_bound: list[Config] = field(default_factory=list)
    proven_by_incumbent: list[Config] = field(default_factory=list)
    dominated: list[Config] = field(default_factory=list)   # best mapping fits a smaller configuration
    pruned_by_tiles: list[Config] = field(default_factory=list)  # rule T (opt-in, not certified)
    lower_bounds: dict[Config, float] = field(default_factory=dict)
    raised_by_capacity: list[Config] = field(default_factory=list)   # rule C's bound above rule H's
    raised_by_fill_stalls: list[Config] = field(default_factory=list)   # rule F's bound above H's and C's
    pruned_by_root_bounds: list[Config] = field(default_factory=list)   # rule R (opt-in, certified)
    raised_by_root_bounds: list[Config] = field(default_factory=list)   # rule R's bound above H's, C's and F's
    bound_seconds: float = 0.0                    # CPU seconds spent on the configurations' bounds
    seconds: float = 0.0

    @property
    def pruned_fraction(self) -> float:
        return 1 - len(self.mapped) / self.configs if self.configs else 0.0


def lower_bound(op: Operator, arch: Accelerator, objective: str, capacity: bool = True,
                fill_stalls: bool = False) -> float:
    """Rule H's bound of the objective, raised by rule C (``capacity_bound``) where that is higher: energy is at
    least the capacity bound, and latency at least H's latency bound, so EDP at least their product. With
    ``fill_stalls``, also by rule F (``fill_stall_bound``): per bypass choice, latency is at least the MAC schedule
    plus the stalls the inputs' fills of single-buffered levels force."""
    cons = Constraints()
    obj, energy, latency = certified_lower_bound(op, arch, cons, chain_options(op, keep_options(op, arch, cons)),
                                                 objective)
    e_cap = capacity_energy_bound(op, arch).energy_pj if capacity and objective != "latency" else 0.0
    value = obj if not e_cap else max(obj, e_cap if objective == "energy" else e_cap * latency)
    if fill_stalls and objective != "energy":
        value = max(value, fill_stall_bound(op, arch, objective, cons, energy_floor=e_cap).value)
    return value


def grid_search(op: Operator, base: Accelerator, levels: tuple[str, ...], configs: list[Config],
                map_config: MapConfig) -> MemorySearch:
    """The baseline: map every configuration."""
    t0 = time.perf_counter()
    res = MemorySearch(configs=len(configs))
    for c in configs:
        found = map_config(c, config_arch(base, levels, c))
        res.mapped.append(c)
        if found is not None and found[0] < res.value:
            res.value, res.mapping, res.best = found[0], found[1], c
    res.seconds = time.perf_counter() - t0
    return res


def co_search(op: Operator, base: Accelerator, levels: tuple[str, ...], choices: Choices,
              configs: list[Config], map_config: MapConfig, objective: str = "edp",
              archs: dict[Config, Accelerator] | None = None, *, tile_dominance: bool = False,
              capacity_bound: bool = True, warm_start: bool = False, fill_stalls: bool = False,
              root_bounds: bool = False, root_order: bool = False,
              root_order_unrollings: int = 1) -> MemorySearch:
    """Sunstone-arch's memory-configuration search with rules H, C and S (B made ``configs``).

    ``archs`` gives each configuration's accelerator (default: ``config_arch`` of ``base``).
    ``tile_dominance``: also apply rule T (the thesis' Observation 4), an uncertified heuristic that may
    lose the optimum; the configurations it drops are listed in ``pruned_by_tiles``. ``capacity_bound``: rule C
    raises each configuration's bound by the traffic its buffer capacities force (certified; on by default).
    ``fill_stalls``: rule F raises it by the stalls single-buffered levels' fills force (certified; opt-in: it
    costs one certified bound per bypass choice, ~0.5 CPU s per Table 7.1 configuration).
    ``root_bounds``: rule R, before mapping a configuration, checks it against the best value found so far with the
    exact search's own unrolling and root bounds (``dse.root_bound``; certified; opt-in: 0.2-0.5 CPU s per Table 7.1
    configuration); one every mapping of which costs at least that value is not mapped
    (``pruned_by_root_bounds``).
    ``root_order``: rule R as the order (certified; opt-in): each configuration's bound is raised to R's bound
    without a bar (``dse.root_bound.root_lower_bound`` over its ``root_order_unrollings`` best unrollings) before
    any mapping, and the configurations are visited in ascending raised bound under rule H's stop. In that order the
    stop cuts every configuration whose bound is at least the final answer (all of lower bound were mapped before
    it, the best one among them), the most any order can cut with these bounds; the ones cut only because R raised
    their bound are listed in ``pruned_by_root_bounds``.
    ``warm_start``: ``map_config`` is called with a third argument, the mappings to start from: rule S's incumbent
    for the configuration and the best mappings of the ``WARM_NEIGHBOURS`` nearest configurations mapped so far
    (the mapper validates and re-costs them; ``arch_search`` passes them to ``map_operator``)."""
    t0 = time.perf_counter()
    res = MemorySearch(configs=len(configs))
    if archs is None:
        archs = {c: config_arch(base, levels, c) for c in configs}
    if tile_dominance:
        keep = promising_configs(op, archs[configs[0]], levels, per_level(choices, len(levels)), set(configs))
        res.pruned_by_tiles = [c for c in configs if c not in keep]
        configs = [c for c in configs if c in keep]
    c0 = time.process_time()
    before_r: dict[Config, float] = {}
    for c in configs:
        h = lower_bound(op, archs[c], objective, False)
        with_c = lower_bound(op, archs[c], objective, capacity_bound) if capacity_bound else h
        res.lower_bounds[c] = lower_bound(op, archs[c], objective, capacity_bound, fill_stalls) if fill_stalls \
            else with_c
        if with_c > h:
            res.raised_by_capacity.append(c)
        if res.lower_bounds[c] > with_c:
            res.raised_by_fill_stalls.append(c)
        if root_order:
            before_r[c] = res.lower_bounds[c]
            rb = root_lower_bound(op, archs[c], objective, root_order_unrollings).value
            if rb > res.lower_bounds[c]:
                res.lower_bounds[c] = rb
                res.raised_by_root_bounds.append(c)
    res.bound_seconds = time.process_time() - c0
    incumbent: dict[Config, tuple[float, Mapping]] = {}
    found_on: dict[Config, Mapping] = {}
    order = sorted(configs, key=lambda c: (res.lower_bounds[c], c))
    for k, c in enumerate(order):
        lb = res.lower_bounds[c]
        if lb >= res.value * (1 - _TOLERANCE):
            # Rule H: this one and every later one; with R's order, those H's, C's and F's bounds alone would have
            # mapped are R's.
            for cut in order[k:]:
                (res.pruned_by_root_bounds if before_r.get(cut, res.lower_bounds[cut]) < res.value * (1 - _TOLERANCE)
                 else res.pruned_by_bound).append(cut)
            break
        inc = incumbent.get(c)
        if inc is not None and inc[0] <= lb * (1 + _TOLERANCE):
            res.proven_by_incumbent.append(c)              # rule S made its optimum known
            continue
        if root_bounds and res.value < float("inf") and beaten_by_root_bounds(op, archs[c], objective,
                                                                               res.value).beaten:
            res.pruned_by_root_bounds.append(c)            # rule R: no mapping of it beats the best found
            continue
        if warm_start:
            found = map_config(c, archs[c], _warm_mappings(c, found_on, inc, per_level(choices, len(levels))))
        else:
            found = map_config(c, archs[c])
        res.mapped.append(c)
        if found is None:
            continue
        value, m = found
        found_on[c] = m
        candidates = [(value, c, m)]
        small = smallest_config(op, archs[c], m, levels, choices)
        if small is not None and small != c and small in archs:
            res.dominated.append(c)
            try:
                r = evaluate(op, archs[small], m)
            except AccelmapError:
                r = None
            if r is not None:
                v = r.objective(objective)
                if v < incumbent.get(small, (float("inf"),))[0]:
                    incumbent[small] = (v, m)
                candidates.append((v, small, m))
        for v, cc, mm in candidates:
            if v < res.value:
                res.value, res.best, res.mapping = v, cc, mm
    res.seconds = time.perf_counter() - t0
    return res


# How many of the nearest mapped configurations give their best mapping to a warm start.
WARM_NEIGHBOURS = 2


def _warm_mappings(c: Config, found_on: dict[Config, Mapping], inc: tuple[float, Mapping] | None,
                   choices: tuple[tuple[int, ...], ...]) -> tuple[Mapping, ...]:
    """Rule S's incumbent of ``c`` and the best mappings of the nearest configurations mapped so far (steps through
    each level's sizes; ties: the one mapped first)."""
    def steps(o: Config) -> int:
        return sum(abs(ch.index(a) - ch.index(b)) for ch, a, b in zip(choices, c, o, strict=True))

    near = sorted(found_on, key=lambda o: (steps(o), list(found_on).index(o)))[:WARM_NEIGHBOURS]
    out = ([inc[1]] if inc is not None else []) + [found_on[o] for o in near]
    return tuple(out)


Tile = tuple[int, ...]                   # a tile's extent in each dimension


def _next_divisor(n: int, f: int) -> int | None:
    return next((d for d in range(f + 1, n + 1) if n % d == 0), None)


def promising_configs(op: Operator, arch: Accelerator, levels: tuple[str, ...],
                      choices: tuple[tuple[int, ...], ...], allowed: set[Config]) -> set[Config]:
    """Rule T: the configurations that are the smallest memory of some tile kept by Algorithm 9.

    One L1 tile per PE (an extent per dimension, each a divisor of the operator's size, as the thesis'
    tile tree has it), whose operands each go to the searched level that holds them; its memory is the
    smallest size per level that holds its part. The traversal walks every tile the largest sizes hold
    (as Algorithm 9 does), and a kept tile counts only when its memory is an ``allowed`` configuration
    (under an area budget, which grows with every size, a tile whose smallest memory is over budget fits
    no configuration within it). A tile is kept unless a one-step larger tile has the same memory
    (Observation 4: assumed never worse). The split into per-level tiles that nested levels really
    have, the spatial unrolling and the latency are ignored, which is why this is a heuristic."""
    held = []
    for name in levels:
        lv = arch.level(name)
        held.append((lv.width_bits, [o for o in op.operands if o.cls in lv.holds]))
    dims = list(op.dim_names)
    sizes = tuple(op.sizes[d] for d in dims)

    def smallest(t: Tile) -> Config | None:
        ext = dict(zip(dims, t, strict=True))
        mem = []
        for (width, ops), level_choices in zip(held, choices, strict=True):
            bits = sum(tile_size(o, ext) * o.bits for o in ops)
            fit = next((w for w in sorted(level_choices) if w * width >= bits), None)
            if fit is None:
                return None
            mem.append(fit)
        return tuple(mem)

    kept, _ = _prune_tiles(sizes, smallest)
    return {m for _, m in kept if m in allowed}


def tile_tree_with_memory(bounds: Tile, footprint: Callable[[Tile], int],
                          mem_choices: tuple[int, ...]) -> tuple[list[tuple[Tile, int]], list[Tile]]:
    """Sunstone-arch's tile traversal (the thesis' Algorithm 9, PRUNE_TILES with mem_choices).

    Breadth first from the all-ones tile; a child enlarges one dimension to its next divisor of
    ``bounds``. Each tile is paired with the smallest memory that holds its ``footprint``. A tile is
    kept, with that memory, unless a child fits the same memory: that child has at least its reuse
    at the same energy per access (the thesis' Observation 4 with Observation 6). Children that fit
    the largest memory are explored either way. Returns the kept (tile, memory) pairs and the
    visited tiles, in visiting order. (The pseudo-code's ``child_mem`` line says "fits node"; the
    text and Fig. 5.2 need the child's own smallest memory, which is what is computed here.)"""
    sizes = sorted(mem_choices)

    def smallest(t: Tile) -> int | None:
        fp = footprint(t)
        return next((m for m in sizes if fp <= m), None)

    return _prune_tiles(bounds, smallest)


M = TypeVar("M")


def _prune_tiles(bounds: Tile, smallest: Callable[[Tile], M | None]) -> tuple[list[tuple[Tile, M]], list[Tile]]:
    """Algorithm 9's breadth-first traversal with ``smallest`` giving a tile's memory (None: fits none)."""
    root = (1,) * len(bounds)
    if smallest(root) is None:
        return [], []
    queue, seen = deque([root]), {root}
    kept: list[tuple[Tile, M]] = []
    visited: list[Tile] = []
    mems: dict[Tile, M | None] = {root: smallest(root)}
    while queue:
        node = queue.popleft()
        visited.append(node)
        mem = mems[node]
        assert mem is not None               # only tiles that fit the largest memory are queued
        all_overflow = True
        for d, n in enumerate(bounds):
            f = _next_divisor(n, node[d])
            if f is None:
                continue
            child = node[:d] + (f,) + node[d + 1:]
            if child not in mems:
                mems[child] = smallest(child)
            child_mem = mems[child]
            if child_mem is None:
                continue
            if child_mem == mem:
                all_overflow = False
            if child not in seen:
                seen.add(child)
                queue.append(child)
        if all_overflow:
            kept.append((node, mem))
    return kept, visited
