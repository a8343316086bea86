"""Lower bounds on energy and latency of every completion of a partial mapping.

The search fixes levels from the innermost outward. With levels >= i fixed
(bounds and orders), R_d is what is left of dimension d for levels < i. For a
boundary whose child c is below i, the terms of transitions of fixed loops
are exact up to one factor: every loop outside level i multiplies them, and
the product of those loops is prod(R_d) however they are split. The first
tile and the outer transitions add at least one tile per fixed instance.
Where nothing is fixed yet, every element of an operand enters at least once.
Group (multicast / reduction) counts divide by at most the largest merge the
unfixed fan-outs allow. Every bound mirrors a term of ``cost.model`` that is
non-decreasing in the counts, so energy, latency and EDP bounds are valid
(docs/mapper.md, rule B1; tests/test_search.py checks bound <= cost).
"""

from __future__ import annotations

import itertools
import math
from collections import abc
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.access_counts import NestInfo, entering_perfect
from accelmap.cost.level_energy import fanout_element_energy
from accelmap.cost.nest_rows import fewest_bits
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.search.burst_bound import burst_cycles, burst_levels, burst_node_classes
from accelmap.search.case_pairs import CaseBound
from accelmap.search.combination_pairs import CombinationPairs
from accelmap.search.drain_after_prologue import drain_lead_terms, drains_after_prologue_cycles
from accelmap.search.first_fill import (
    first_block_cycles,
    first_fill_terms,
    first_queue_terms,
    last_drain_cycles,
    last_drain_terms,
)
from accelmap.search.last_step import last_step_cycles, last_step_level, last_tile_tail, stream_load_cycles
from accelmap.search.merge_ceiling import merge_room
from accelmap.search.open_level_energy import least_refill_energy
from accelmap.search.open_level_refills import open_levels_stall
from accelmap.search.orders import _LevelCounter, kept_counts
from accelmap.search.padded_mac_reads import mac_read_groups
from accelmap.search.pinned_refill import boundary_charge, open_levels_energy
from accelmap.search.window_runs import first_tile_share, window_indices, window_users
from accelmap.workload.index_sets import tile_size
from accelmap.workload.operator import Operand, Operator

if TYPE_CHECKING:
    from accelmap.search.pinned_stall import PinnedStall


# ``BoundContext.run_alternatives``' placeholder for the whole positions of a nest with partial tiles.
_FULL = object()

# The most node parts a search keeps (``BoundContext.node_part``); past it they are all dropped. A node's orders are
# bounded close together in the depth-first search (its siblings' subtrees between them, mostly cut early).
NODE_PARTS = 20_000


class NodePart:
    """What ``BoundContext.lower_bound`` computes for a node (its fixed loops as a multiset, what is left of each dim,
    its whole positions) that no loop order changes: the tiles, fixed spatial instances and extents at each boundary,
    the MACs' side per operand, the cases of the unfixed loops with the compute, edge, open-level and step terms
    (``shared``), and each operand's traffic per case keyed by what it reads of the order (``traffic``). Its orders,
    its open-order bounds (rules B3, B4) and rule B30's per-order bounds read it instead of recomputing it."""

    __slots__ = ("extents", "tiles", "instances", "mac_sides", "head", "shared", "traffic", "counters", "any_order", "bounds")

    def __init__(self) -> None:
        self.extents: dict[int, dict[str, int]] = {}
        self.tiles: dict[tuple[str, int], int] = {}
        self.instances: dict[int, int] = {}
        self.mac_sides: dict[str, tuple[float, float]] = {}
        self.head: tuple | None = None
        self.shared: tuple | None = None
        self.traffic: dict[tuple, tuple] = {}
        self.counters: dict[tuple[Loop, ...], dict[tuple[str, int], Any]] = {}
        # ``entering_any_order``'s parts for the last nest bounded with orders open: (fixed, free levels, parts)
        self.any_order: tuple[tuple[Loop, ...], frozenset[int], dict[tuple[str, int], tuple]] | None = None
        # The bounds computed, per (fixed as ordered, free levels, innermost loop)
        self.bounds: dict[tuple, tuple[float, float]] = {}


class BoundContext:
    """What stays the same for every node of one search: operator, accelerator, bypass."""

    # Every tile of a level is as large as its first (perfect factors): rule B10 bounds the output's last drain by
    # the first tile. Not so with imperfect tiles (``ImperfectBoundContext``), whose last tile may be partial.
    whole_tiles = True
    # The search's deadline (``time.perf_counter``'s clock), read inside the long bound computations
    # (``search/deadline.py``); None: never interrupted.
    deadline: float | None = None

    def __init__(self, op: Operator, arch: Accelerator, keep: tuple[frozenset[str], ...],
                 spatial: dict[str, dict[str, int]] | None = None, objective: str | None = None):
        """``spatial``: fan-out axes fixed in advance (axis -> {dim: bound}, as the constraints give them); a level
        whose axes are all fixed unrolls exactly that, which tells rule B7 which dims have temporal loops left.
        ``objective``: a scalar objective the bounds serve (rule B22, ``case_pairs``: each case's energy and latency
        stay paired, and the pair returned is then a bound of that objective only); None: an energy bound and a
        latency bound, each valid alone."""
        self.op, self.arch, self.keep = op, arch, keep
        self.objective = objective
        self.nlev = len(arch.levels)
        fixed_axes = self.fixed_axes = spatial or {}
        self.plain = {o.name: frozenset(ix.terms[0][0] for ix in o.indices if len(ix.terms) == 1)
                      for o in op.operands}
        # Per level, the most each dim can be unrolled on its fan-out (None: any amount the fan-out holds).
        self.spatial_cap: list[dict[str, int] | None] = []
        for lv in arch.levels:
            if lv.fanout is None:
                self.spatial_cap.append({})
            elif all(a.name in fixed_axes for a in lv.fanout.axes):
                cap: dict[str, int] = {}
                for a in lv.fanout.axes:
                    for d, b in fixed_axes[a.name].items():
                        cap[d] = cap.get(d, 1) * b
                self.spatial_cap.append(cap)
            else:
                self.spatial_cap.append(None)
        self.footprint = {o.name: op.footprint(o) for o in op.operands}
        self.macs = op.macs     # (a property that multiplies the sizes at each read)
        # The node parts of ``lower_bound`` (``NodePart``), per node: its loops as a multiset, what is left, and
        # the whole positions (bounded: cleared past NODE_PARTS entries).
        self._nodes: dict[tuple, NodePart] = {}
        self.n_out = self.footprint[op.output.name]
        self.init_read = 1 if op.init_output == "read" else 0
        self.chains = {o.name: [i for i in range(self.nlev) if o.name in keep[i]] for o in op.operands}
        # Operands the rules below cannot count (kept at a level shared along a fan-out axis, or a padded
        # input whose halo is generated) get no terms (zero: the bounds stay lower bounds, only weaker)
        self.loose = frozenset(o.name for o in op.operands if loose_operand(arch, o, self.chains[o.name]))
        self.fan_sizes = [lv.fanout.size if lv.fanout else 1 for lv in arch.levels]
        # Largest merge an unfixed fan-out at level l can give operand X: multicast axes for inputs,
        # reducing axes for the output (the only axes a non-output dimension may use).
        # A fan-out fixed in advance merges exactly what its unrolling gives (the dims X does not use).
        self.merge_cap = {}
        for o in op.operands:
            caps = []
            for lv in arch.levels:
                if lv.fanout is None:
                    caps.append(1)
                elif all(a.name in fixed_axes for a in lv.fanout.axes):
                    caps.append(math.prod(b for a in lv.fanout.axes if o.is_output or a.multicast
                                          for d, b in fixed_axes[a.name].items() if d not in o.dims))
                elif o.is_output:
                    caps.append(math.prod(a.size for a in lv.fanout.axes if a.reduce))
                else:
                    caps.append(math.prod(a.size for a in lv.fanout.axes if a.multicast))
            self.merge_cap[o.name] = caps
        self.scale = {(i, o.name): fewest_bits(o, arch) / lv.width_bits
                      for i, lv in enumerate(arch.levels) for o in op.operands}
        # Rule B14: network energy per element moved into (and, for the output, out of) each level of an operand's
        # chain from its parent, and between its last level and the MACs (key: the child, nlev for the MACs).
        self.net_unit = {(o.name, c): network_unit(arch, o, p, c) for o in op.operands
                         for p, c in pairwise(self.chains[o.name] + [self.nlev])}
        self._open_floor: dict[int, float] = {}
        self.open_stall: dict[int, float] = {}      # rule B27 per open level (``open_level_refills``)
        self.open_loads: dict[int, Any] = {}        # rules B41-B43's terms per open level (``open_level_loads``)
        self._runs: dict[tuple, list[dict[str, Any]]] = {}      # run_alternatives per (rem, level, ...)
        # ``temporal_left`` per (rem, level) and the product of ``merge_cap`` per (operand, lo, hi): functions of
        # the context's fan-outs alone, asked for by every node part (dropped with the node parts, ``__setattr__``).
        self._left: dict[Any, tuple[dict[str, int], bool]] = {}       # (also ``_open_most`` per level)
        self._merge_prod: dict[tuple[str, int, int], int] = {}
        self._holds: dict[tuple[str, int], tuple[int | None, int]] = {}     # ``holds_only``'s capacity and bits
        # Rule B18: per (operand, dim), the operand's sliding-window indices over that dim.
        self.windows = window_indices(op)
        # Rule B19: the deepest level that receives tiles, when the model charges a step of compute after a port's
        # last load (None: the rule does not apply).
        self.last_step_level = last_step_level(op, arch, self.chains)
        # Rule B29: the levels whose loads hide only behind a window of compute, and their classes per ordered nest.
        self.burst_levels = burst_levels(self)
        self.burst_memo: dict[tuple, Any] = {}
        # X's tile per extents of the dims its indices read (``tile_of``): nodes share inner tiles, so the sizes are
        # counted once per search, not once per node bound.
        self._tile_dims = {o.name: tuple(dict.fromkeys(d for ix in o.indices for d, _ in ix.terms)) for o in op.operands}
        self._tiles: dict[tuple, int] = {}
        # Rule B9: levels that load with compute stopped under every mapping (single-buffered, not
        # double-buffered when two tiles fit, and not streaming a tile kept for the whole run), whose
        # fills add to the MAC schedule.
        self.serial_fill = serial_fill_levels(arch)
        # Rule B12: single-buffered levels whose loads from parent p are paced by p's read port (the child's write
        # port is no slower), so that they queue on it at every tile change.
        # (parent, child) -> the parent's read bandwidth.
        self.port_paced: dict[tuple[int, int], float] = {}
        for o in op.operands:
            for p, c in pairwise(self.chains[o.name]):
                read_bw = arch.levels[p].read_bw_bits
                if c in self.serial_fill and read_bw is not None and paced_by_parent(arch, p, c):
                    self.port_paced[(p, c)] = read_bw
        # Rule B56: the first tiles' loads into single-buffered levels fed one to one (``first_fill``).
        self.first_fill_terms = first_fill_terms(op, arch, self.chains, self.serial_fill, self.loose)
        # Rule B71: ... and the first tiles' loads that one parent's read port paces queue on it.
        self.first_queue_terms = first_queue_terms(op, arch, self.chains, self.serial_fill, self.loose,
                                                   self.spatial_cap, self.port_paced)
        # Rule B59: the output's last drains from single-buffered levels drained one to one (``first_fill``).
        # Rule B70: ... and from the levels fed through a fan-out, the parent taking every busy instance's tile.
        self.last_drain_terms = last_drain_terms(op, arch, self.chains, self.serial_fill, self.loose, self.spatial_cap)
        # Rule B10: the first load of every operand into a level that overlaps its transfers with compute, and the
        # last drain of the output from it, run before the first and after the last compute (prologue, epilogue).
        # Per such transfer: (operand, child level, setup cycles, cycles per element at the slower of the child's
        # and the parent's port, the fewest elements per instance that level moves in all).
        self.edge_terms: list[tuple[Operand, int, int, float, float]] = []
        for o in op.operands:
            if o.name in self.loose:
                continue
            w = fewest_bits(o, arch)
            for p, c in pairwise(self.chains[o.name]):
                P, C = arch.levels[p], arch.levels[c]
                # A streamed single tile (stream_single_tile) enters in pieces: its prologue is one piece, not
                # the tile, so the level gets no term here (leaving it out keeps the bound a lower bound).
                if not (C.refills_during_compute or C.double_buffered_when_fits) or C.stream_single_tile:
                    continue
                child, parent = (C.read_bw_bits, P.write_bw_bits) if o.is_output else (C.write_bw_bits, P.read_bw_bits)
                per = w * max(0.0 if child is None else 1 / child, 0.0 if parent is None else 1 / parent)
                self.edge_terms.append((o, c, C.transfer_setup_cycles, per, self.footprint[o.name] / C.instances))

    # Attributes set while bounds are computed that the node parts do not depend on (the deadline), or that only
    # restate the node a bound is asked for (a subclass's scratch of ``lower_bound``'s own arguments).
    per_call_attributes: frozenset[str] = frozenset({"deadline"})
    # Rule B73 (``drain_after_prologue``); the tests switch it off to measure what it adds.
    drains_after_prologue: bool = True

    def __setattr__(self, name: str, value: Any) -> None:
        """Setting anything but a ``per_call_attributes`` one after the first bound (a rule switched off or replaced,
        as rule B36 and the tests do) drops the node parts, which were computed with the old value."""
        if name not in self.per_call_attributes and self.__dict__.get("_nodes"):
            self.__dict__["_nodes"] = {}
        if name not in self.per_call_attributes and name not in ("_left", "_merge_prod", "_holds") \
                and (self.__dict__.get("_left") or self.__dict__.get("_merge_prod") or self.__dict__.get("_holds")):
            self.__dict__["_left"], self.__dict__["_merge_prod"], self.__dict__["_holds"] = {}, {}, {}
        object.__setattr__(self, name, value)

    def __copy__(self) -> BoundContext:
        """A shallow copy with node parts of its own: a copy is made to change what the bounds read (rule B36,
        ``root_pairs``, leaves the open levels' terms out), so the original's node parts do not hold for it."""
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__)
        out._nodes = {}
        return out

    def ranking_context(self) -> BoundContext:
        """A copy whose bounds leave out rules B70 and B71 (B59's drains and B56's first loads stay): lower bounds
        still, only weaker. The exact search ranks a node's children by this copy's bounds and cuts each child with
        this context's own when its turn comes (``search_optimal``): ranked by B70/B71, the children came in another
        order than before them and the first mappings found in 10 s were worse on three simba_like ResNet-18 layers
        (a stronger bound must not make the anytime result worse). Contexts without these terms return themselves."""
        drains = last_drain_terms(self.op, self.arch, self.chains, self.serial_fill, self.loose, self.spatial_cap,
                                  spread=False)
        if not self.first_queue_terms and drains == self.last_drain_terms:
            return self
        out = self.__copy__()
        out.first_queue_terms = []
        out.last_drain_terms = drains
        return out

    def lower_bound(self, fixed: tuple[Loop, ...], level: int, rem: dict[str, int], *,
                    free_orders: frozenset[int] = frozenset(), innermost: Loop | None = None,
                    full_positions: int | None = None) -> tuple[float, float]:
        """(energy, latency) lower bounds with levels >= ``level`` fixed as ``fixed``. The bound holds for every
        order of the temporal loops of the levels in ``free_orders`` (the outermost fixed ones; rule B3),
        whatever order ``fixed`` lists them in, so a tiling can be cut before its orders are enumerated; with
        ``innermost``, for the orders of the innermost free level that put that loop innermost (rule B4).
        ``full_positions``: with imperfect factors, how many positions of the fixed nest lie wholly inside the
        operator (rule I2 of docs/mapper.md); the fixed nest's refetches are counted only there. Default: every
        one of the ``prod(rem)`` positions (perfect factors)."""
        op, arch, nlev = self.op, self.arch, self.nlev
        prod_r = math.prod(rem.values())
        full = prod_r if full_positions is None else full_positions
        # What does not depend on the loops' order (``NodePart``) is computed once per node and shared by its orders,
        # its open-order bounds (rules B3, B4) and rule B30's per-order bounds; below, only the refetch counts
        # (``entering``), rule B18's shares and what reads the order (B20, B29) are computed per call.
        node = self.node_part(fixed, level, rem, full_positions)
        # The same nest bounded again (rule B30's orders, then the order's own turn in the search) reads the node's
        # bound kept for it: every term is a function of these arguments and the context.
        asked = (fixed, free_orders, innermost)
        kept = node.bounds.get(asked)
        if kept is not None:
            return kept
        if free_orders:
            # The open-order counts' parts that no innermost loop changes, kept for this nest (the same ``fixed``
            # object: a tiling's bound over every order and its bounds per innermost loop, rule B4, follow each other).
            shared = node.any_order
            if shared is None or shared[0] is not fixed or shared[1] != free_orders:
                shared = node.any_order = (fixed, free_orders, {})
            entering = entering_any_order(op, fixed, free_orders, self.keep, innermost, shared[2])
        else:
            entering = self.ordered_entering(node, fixed, level)
        spatial = [l for l in fixed if l.spatial]
        extents = node.extents

        def inner_extents(c: int) -> dict[str, int]:
            ext = extents.get(c)
            if ext is None:
                ext = extents[c] = dict.fromkeys(op.sizes, 1)
                for l in fixed:
                    if l.level >= c:
                        ext[l.dim] *= l.bound
                # An imperfect nest may overshoot a dim (its last tile partial); the tile is clipped to it.
                for d, size in op.sizes.items():
                    ext[d] = min(ext[d], size)
            return ext

        # Per node, what every operand_traffic call and every B7 case shares: X's tile at c, the fixed
        # spatial instances below c, and ``entering`` (the same function of (X, c) for all of them).
        tiles, instances = node.tiles, node.instances
        entered: dict[tuple[str, int], int] = {}

        def tile_at(X: Operand, c: int) -> int:
            t = tiles.get((X.name, c))
            if t is None:
                t = tiles[(X.name, c)] = self.tile_of(X, inner_extents(c))
            return t

        def instances_below(c: int) -> int:
            fi = instances.get(c)
            if fi is None:
                fi = instances[c] = math.prod(l.bound for l in spatial if l.level < c)
            return fi

        def entering_at(X: Operand, c: int) -> int:
            n = entered.get((X.name, c))
            if n is None:
                n = entered[(X.name, c)] = entering(X, c)
            return n

        # Rule B60 where tiles may be partial (with whole tiles every spatial loop divides its dim: no cap binds).
        clip = None if self.whole_tiles else op.sizes
        merge_prod = self._merge_prod
        left_outside: dict[str, int] = {}

        def unfixed_merge(X, lo: int, hi: int) -> float:
            # Max product of unfixed spatial loops on dims outside X at levels lo..hi-1 (< level), within rule B60's
            # room where a padded dim caps the whole merge.
            top = min(hi, level)
            cap = merge_prod.get((X.name, lo, top))
            if cap is None:
                cap = merge_prod[(X.name, lo, top)] = math.prod(self.merge_cap[X.name][l] for l in range(lo, top))
            if cap == 1:
                return 1
            outside = left_outside.get(X.name)
            if outside is None:
                outside = left_outside[X.name] = math.prod(r for d, r in rem.items() if d not in X.dims)
            most = min(cap, outside)
            if clip is None:
                return most
            return min(most, merge_room(self, X, lo, hi, level, spatial, fixed_merge(X, lo, hi)))

        def fixed_merge(X, lo: int, hi: int) -> int:
            return fixed_spatial_merge(arch, spatial, X, lo, hi, clip)

        def lineage_max(X, p: int) -> float:
            return fixed_spatial_lineage(spatial, X, p, clip) * unfixed_merge(X, 0, p)

        # Rule B7: a boundary with its tile fixed and no fixed temporal loop above it (c from ``level`` up to the
        # first fixed temporal loop) has only unfixed loops above; the innermost unfixed temporal loop, over a
        # plain dim of X, brings X a whole tile at every temporal step of every instance.
        if node.head is None:
            node.head = (
                min((l.level for l in fixed if not l.spatial and l.bound > 1), default=nlev),
                # Rules B7 and B15: per case, how many runs of the fixed nest start with a new first tile, per operand.
                self.run_alternatives(rem, level, full, perfect=full_positions is None),
                # Rule B17: the unfixed temporal iterations, when every fan-out is fixed and the tiles are whole (else
                # 0: off).
                self.unfixed_steps(rem, level) if full_positions is None and self.whole_tiles else 0)
        first_temporal, alternatives, pinned_steps = node.head
        # Rule B20: with every level's order fixed, an input stream's last tile computes after its port's last load
        # (perfect nests, every fan-out fixed: the unfixed temporal iterations known).
        last_tile = self.last_step_level is not None and not free_orders and pinned_steps > 0 \
            and not any(lv.stream_single_tile for lv in arch.levels)

        shares: dict[tuple[str, str, int], float] = {}

        def window_share(X: Operand, d: str, c: int) -> float:
            # Rule B18: the share of X's tile at c that every run brings when the innermost unfixed loop is over d.
            got = shares.get((X.name, d, c))
            if got is None:
                got = shares[(X.name, d, c)] = first_tile_share(X, self.windows[(X.name, d)], d, fixed, level, c)
            return got

        def operand_traffic(X: Operand, runs: int | tuple[int, str] | None) -> tuple[float, list[tuple[int, str, float]],
                                                                   dict[int, float], dict[int, Any], dict[int, Any],
                                                                   Any, dict[int, float], dict[tuple[int, int, str], float]]:
            if X.name in self.loose:
                return 0.0, [], {}, {}, {}, 0.0, {}, {}
            chain = self.chains[X.name]
            fp = self.footprint[X.name]
            floor = self.n_out if X.is_output else fp
            per: dict[tuple[int, str], Any] = {}
            # Rule B17: what the latency terms count where an open level can hold no more than the fixed tile of X
            # (``per`` for energy, where rule B8 already charges open levels' refills: not counted twice).
            per_lat: dict[tuple[int, str], Any] = {}
            loads: list[tuple[int, int, float, float]] = []    # (parent, child, elements in, elements out)
            pinned_extra: dict[int, float] = {}      # rule B23: per open level, B17's count's energy beyond B1's
            window = None
            if isinstance(runs, tuple):     # rule B18's case: (runs with a whole new tile, the window's dim)
                runs, window = runs
            for p, c in pairwise(chain):
                pinned = None
                if runs is not None and level <= c <= first_temporal:
                    t = tile_at(X, c)
                    fi = instances_below(c)
                    member: float = runs * self.first_tiles(X, c, fi, t, full, fixed, inner_extents(c))
                    if window is not None:
                        member = max(member, full * fi * t * window_share(X, window, c))
                elif c > level:
                    t = tile_at(X, c)
                    fi = instances_below(c)
                    part = entering_at(X, c)
                    # Every run of the fixed nest repeats its transitions; ``runs`` of them start with a new first
                    # tile (rules B7, B15; at least one), and in rule B18's case every run brings part of one.
                    first: float = (1 if runs is None else runs) * self.first_tiles(X, c, fi, t, full, fixed,
                                                                                    inner_extents(c))
                    if window is not None:
                        first = max(first, full * fi * t * window_share(X, window, c))
                    member = self.refetch_volume(X, c, full, prod_r, part, fi, t) + first
                else:
                    member = fp
                    if runs is not None and runs == full and pinned_steps and c < level \
                            and self.holds_only(X, c, tile_at(X, c)):
                        pinned = max(pinned_steps * self.open_instances_above(c) * tile_at(X, c), floor)
                member = max(member, floor)
                # Energy takes B1's counts, the latency terms B17's where it applies (the loads as well): one
                # computation for both where it does not.
                cases = ((member, (per, per_lat)),) if pinned is None else ((member, (per,)), (pinned, (per_lat,)))
                charged = []
                for m, targets in cases:
                    group = max(m / (fixed_merge(X, p, c) * unfixed_merge(X, p, c)), fp if not X.is_output else 0)
                    if X.is_output:
                        group = max(group, self.n_out)
                        down = max(0.0, group - self.n_out * (lineage_max(X, p) - self.init_read))
                        moved = {(c, "fills"): down, (p, "reads"): down, (c, "drains"): m, (p, "updates"): group}
                        into, out = down, down
                    else:
                        moved = {(c, "fills"): m, (p, "reads"): group}
                        into, out = m, group
                    for counts in targets:
                        counts.update(moved)
                    if pinned is not None:
                        charged.append(boundary_charge(self, X, c, moved))
                if charged:
                    pinned_extra[c] = max(0.0, charged[1] - charged[0])
                loads.append((p, c, into, out))
            last = chain[-1]
            reads, updates = mac_side(X)
            for counts in (per, per_lat):
                if X.is_output:
                    counts[(last, "updates")] = counts.get((last, "updates"), 0) + updates
                counts[(last, "reads")] = counts.get((last, "reads"), 0) + reads
            energy = 0.0
            w = fewest_bits(X, arch)
            for (lv, kind), v in per.items():
                L = arch.levels[lv]
                s = self.scale[(lv, X.name)]
                energy += v * (L.read_energy_pj if kind in ("reads", "drains") else L.write_energy_pj) * s
            bits = [(lv, kind, v * w) for (lv, kind), v in per_lat.items()]
            energy += self.network_energy(X, per)
            serial = {}
            for p, c, into, out in loads:
                if c in self.serial_fill:
                    P, C = arch.levels[p], arch.levels[c]
                    serial[c] = max(0.0 if C.write_bw_bits is None else into * w / C.instances / C.write_bw_bits,
                                    0.0 if P.read_bw_bits is None else out * w / P.instances / P.read_bw_bits)
            queued, on_port = self.load_port_cycles(loads, w)
            first_fill = first_block_cycles(op, self.first_fill_terms, self.first_queue_terms if full_positions is None
                                            and self.whole_tiles else (), tile_at) if X.is_output else 0.0  # B56, B71
            return energy, bits, serial, queued, on_port, self.chain_stall_cycles(X, per_lat, serial, w, first_fill), \
                pinned_extra, stream_load_cycles(arch, X.name, loads, w) if last_tile else {}

        mac_sides = node.mac_sides

        def mac_side(X: Operand) -> tuple[float, float]:
            """What the MACs read from X's last level (and, for the output, update at it): the same for every case
            of the unfixed loops."""
            got = mac_sides.get(X.name)
            if got is None:
                last = self.chains[X.name][-1]
                g = self.macs / (fixed_merge(X, last, nlev) * unfixed_merge(X, last, nlev))
                rounds = mac_read_groups(self, spatial, X, last, level)      # rule B57: a padded round's idle lanes
                if rounds is not None:
                    g = max(g, rounds)
                if X.is_output:
                    got = (0 + max(0.0, g - self.n_out * (lineage_max(X, last) - self.init_read)), 0 + g)
                else:
                    got = (0 + g, 0.0)
                mac_sides[X.name] = got
            return got

        def order_inputs(X: Operand, runs: int | tuple[int, str] | None) -> tuple:
            """What ``operand_traffic(X, runs)`` reads of the loops' order: X's refetch counts at the boundaries where
            it counts them and rule B18's shares (the rest of its inputs are the node's)."""
            if X.name in self.loose:
                return ()
            window = None
            if isinstance(runs, tuple):
                runs, window = runs
            got: list[float] = []
            for c in self.chains[X.name][1:]:
                if runs is not None and level <= c <= first_temporal:
                    if window is not None:
                        got.append(window_share(X, window, c))
                elif c > level:
                    got.append(entering_at(X, c))
                    if window is not None:
                        got.append(window_share(X, window, c))
            return tuple(got)

        if node.shared is None:
            # Rule B11: what the MACs read from (and, for the output, update at) each operand's last level streams
            # during compute.
            served = []
            for X in op.operands:
                if X.name in self.loose:      # kept at a shared level: no terms (``BoundContext.loose``)
                    continue
                last, w = self.chains[X.name][-1], fewest_bits(X, arch)
                reads, updates = mac_side(X)
                served.append((last, True, reads * w))
                if X.is_output:
                    served.append((last, False, updates * w))

            # Compute cycles: all the work over the most PEs the unfixed fan-outs could add.
            spatial_fixed = math.prod(l.bound for l in spatial)
            open_fans = math.prod(self.fan_sizes[l] if cap is None else math.prod(cap.values())
                                  for l, cap in enumerate(self.spatial_cap[:level]))
            spatial_max = spatial_fixed * min(prod_r, open_fans)
            compute = max(math.ceil(math.ceil(self.macs / spatial_max) / arch.compute.macs_per_cycle),
                          self.least_schedule(fixed, level, rem))
            # An operand with no boundary at or below ``level`` (and none that rule B17 counts) has the same traffic
            # in every case.
            moved = {X.name: any(c >= level or (pinned_steps and X.name not in self.loose
                                                and self.holds_only(X, c, tile_at(X, c)))
                                 for c in self.chains[X.name][1:]) for X in op.operands}
            cases: list[tuple[tuple[str, int | None], ...]] = []
            for alt in alternatives:
                keys = tuple((X.name, alt[X.name] if moved[X.name] else None) for X in op.operands)
                if keys not in cases:       # else the same traffic for every operand as a case already listed
                    cases.append(keys)
            edge_terms = self.edge_cycle_terms(tile_at, level)
            edge, drain = self.edge_cycles(tile_at, level, edge_terms)
            busy = max(compute, float(self.stream_cycles(served)))
            # Rule B8: the boundaries into levels not fixed yet, each over every tile that fits its level.
            floors = {c: self.open_level_floor(c) for c in range(1, level)}
            # Rule B27: the open single-buffered levels' least refills stall compute.
            open_stall = open_levels_stall(self, level)
            # Rule B19: a step of compute follows a port's last load (perfect nests: the temporal loops are whole).
            step = last_step_cycles(fixed, self.last_step_level, arch.compute.macs_per_cycle) \
                if self.last_step_level is not None and full_positions is None and self.whole_tiles else 0.0
            # Rule B73: the output's drains from a double-buffered level follow every other prologue term.
            leads = drain_lead_terms(self, edge_terms, lambda c: last_step_cycles(fixed, c, arch.compute.macs_per_cycle))
            node.shared = (cases, float(edge), float(drain), busy, floors, open_stall, step, leads)
        cases, edge, drain, busy, floors, open_stall, step, leads = node.shared
        # Each operand's traffic per case; the node keeps it by what it reads of the order (orders that give X the
        # same refetch counts share it).
        traffic: dict[tuple[str, int | None], tuple] = {}
        for keys in cases:
            for X, tk in zip(op.operands, keys, strict=True):
                if tk not in traffic:
                    memo = (tk, last_tile, order_inputs(X, tk[1]))
                    got = node.traffic.get(memo)
                    if got is None:
                        got = node.traffic[memo] = operand_traffic(X, tk[1])
                    traffic[tk] = got
        least = CaseBound(self.objective)      # rule B22
        # Rule B59: the output's last drains follow every load (whole tiles: the last tile is the fixed one, or more).
        last_drains = last_drain_cycles(op, self.last_drain_terms, tile_at) \
            if full_positions is None and self.whole_tiles else 0.0
        # Rule B29: a double buffer hides a load only behind a window of compute (every fan-out fixed, whole tiles).
        bursts, outside = burst_node_classes(self, fixed, level, free_orders, pinned_steps) \
            if full_positions is None and self.whole_tiles else ([], 0)
        for keys in cases:
            # Rule B23: per open level, the larger of B8's least refill and B17's refills in this case.
            energy = self.macs * arch.compute.mac_energy_pj + open_levels_energy(floors, [traffic[tk][6] for tk in keys])
            port: dict[tuple[int, bool], float] = {}      # (level, is read) -> bits
            serial = dict.fromkeys(self.serial_fill, 0.0)
            port_queue: dict[int, float] = {}
            port_loads: dict[int, float] = {}
            chained = 0.0
            streams: dict[tuple[int, int, str], float] = {}
            led = 0.0
            for tk in keys:
                e, bits, loads, queued, on_port, own, _, mine = traffic[tk]
                if leads and tk[0] == op.output.name:
                    led = float(drains_after_prologue_cycles(arch, leads, bits))     # rule B73
                streams.update(mine)
                chained = max(chained, own)
                energy += e
                for lv, kind, b in bits:
                    key = (lv, kind in ("reads", "drains"))
                    port[key] = port.get(key, 0.0) + b
                for lv, t in loads.items():
                    serial[lv] += t
                for lv, t in queued.items():
                    port_queue[lv] = port_queue.get(lv, 0.0) + t
                for lv, t in on_port.items():
                    port_loads[lv] = port_loads.get(lv, 0.0) + t
            # Rule B9: a level that never overlaps its loads with compute stalls it while it loads; its loads
            # run one after another, each at least its data over the child's write port and over the parent's
            # read port (other levels' loads run in parallel: the longest counts).
            stall = max(serial.values(), default=0.0)
            # Rule B12: loads into single-buffered levels that a parent's read port paces queue on that port
            # (other operands' and other levels' alike), so the stall is at least their sum.
            stall = max(stall, max(port_queue.values(), default=0.0))
            # Rule B59: the output's last drains come after every load.
            stall = stall + last_drains
            # Rule B16: an operand's loads into a single-buffered level and its parent run in sequence; the output's
            # stores run one after another, and its reloads into a level wait for that level's store.
            stall = max(stall, chained, open_stall)
            # Latency is at least the MAC schedule and at least every port's traffic over its
            # bandwidth spread over all instances (cost/latency.py uses only the occupied ones).
            transfer = 0.0
            for (lv, is_read), b in port.items():
                L = arch.levels[lv]
                bw = L.read_bw_bits if is_read else L.write_bw_bits
                if bw is not None:
                    transfer = max(transfer, b / L.instances / bw)
            # Rule B13: the last output drain of an overlapping level follows every load on a parent's read port.
            tail = max(port_loads.values(), default=0.0) + drain + step
            if last_tile:
                # Rule B20: ... and a stream's last tile computes for its whole period after it.
                tail = max(tail, last_tile_tail(op, fixed, level, pinned_steps, streams, busy) + drain)
            inner = busy + stall if not bursts else float(burst_cycles(bursts, outside, busy + stall))
            least.add(energy, max(inner + edge, transfer, tail, led))
        kept = node.bounds[asked] = least.pair()
        return kept

    def refetch_volume(self, X: Operand, c: int, full: int, prod_r: int, part: float, fi: int, t: int) -> float:
        """B1's refetches of X into c beyond each run's first tile: the fixed nest's own (``part`` entering c, less
        its first tile ``t`` in each of its ``fi`` instances) at ``refetch_positions`` of its positions; rules B46-B48
        over Ruby-S tiles count the partial positions too (``padded_partial_refetches``)."""
        return self.refetch_positions(X, c, full, prod_r) * (part - fi * t)

    def node_part(self, fixed: tuple[Loop, ...], level: int, rem: dict[str, int],
                  full_positions: int | None) -> NodePart:
        """The ``NodePart`` of ``lower_bound``'s node: the same for every order of ``fixed`` (the loops as a multiset)
        and every free level or innermost loop the bound is asked for."""
        key = (level, tuple(rem.items()), full_positions,
               tuple(sorted((l.level, l.dim, l.bound, l.axis or "") for l in fixed)))
        got = self._nodes.get(key)
        if got is None:
            if len(self._nodes) > NODE_PARTS:
                self._nodes.clear()
            got = self._nodes[key] = NodePart()
        return got

    def ordered_entering(self, node: NodePart, fixed: tuple[Loop, ...], level: int):
        """``(X, c) -> entering_perfect`` of the nest ``fixed`` (every order known) at a boundary c below ``level``.
        Where ``fixed`` is the level's temporal loops (one per dim) followed by the rest (the level's spatial loops and
        every deeper loop), as the search builds its nests, each count comes from a counter of the rest kept by the
        node (``orders._LevelCounter``: the deeper loops walked once, the level's own loops per order; equal to
        ``entering_perfect``); else from the whole nest."""
        k = 0
        while k < len(fixed) and fixed[k].level == level and not fixed[k].spatial:
            k += 1
        order, rest = tuple(l for l in fixed[:k] if l.bound > 1), fixed[k:]
        if len({l.dim for l in order}) < len(order) or \
                any(l.level < level or (l.level == level and not l.spatial and l.bound > 1) for l in rest):
            info = NestInfo(self.op, Mapping(fixed, self.keep))
            return lambda X, c: entering_perfect(info, X, c)
        counters = node.counters.get(rest)
        if counters is None:
            counters = node.counters[rest] = {}
        # An order rule O2 kept has its counts already (``orders.kept_counts``).
        known = kept_counts(self.op, rest, order)

        def entering(X: Operand, c: int) -> int:
            if known is not None:
                n = known.get((X.name, c))
                if n is not None:
                    return n
            counter = counters.get((X.name, c))
            if counter is None:
                counter = counters[(X.name, c)] = _LevelCounter(self.op, X, c, rest)
            return counter.entering(order)

        return entering

    def refetch_positions(self, X: Operand, c: int, full: int, prod_r: int) -> int:
        """Positions of the fixed nest at which B1 counts X's refetches at boundary c: ``full`` (every one with whole
        tiles; rule I2's whole positions with imperfect ones; rule B44 over Ruby-S tiles, ``padded_round_positions``)."""
        return full

    def tile_of(self, X: Operand, ext: dict[str, int]) -> int:
        """``tile_size(X, ext)``, memoized by the extents of the dims X's indices read (bounded: cleared past
        200,000 entries)."""
        key = (X.name, tuple(ext[d] for d in self._tile_dims[X.name]))
        got = self._tiles.get(key)
        if got is None:
            if len(self._tiles) > 200_000:
                self._tiles.clear()
            got = self._tiles[key] = tile_size(X, ext)
        return got

    def first_tiles(self, X: Operand, c: int, fi: int, t: int, full: int, fixed: tuple[Loop, ...],
                    ext: dict[str, int]) -> float:
        """What one run of the fixed nest that starts with a new tile brings X into c over its ``fi`` instances:
        ``fi x t`` with whole tiles; rule B61 where no position is whole (``ImperfectBoundContext``)."""
        return fi * t

    def least_schedule(self, fixed: tuple[Loop, ...], level: int, rem: dict[str, int]) -> int:
        """A MAC schedule every completion of the node has beyond ``ceil(MACs / PEs)``: none with whole tiles (there
        the two are equal once the fan-outs are fixed); rule B32 where tiles may be partial (``ImperfectBoundContext``)."""
        return 0

    def network_energy(self, X: Operand, per: dict[tuple[int, str], Any]) -> Any:
        """Rule B14: the network energy of X, from B1's fills and drains of every level of its chain but the first
        (``per``: (level, kind) -> count, numbers or arrays of rows) and the MACs' operands and results, which cross
        the fan-outs below X's last level once per MAC (the output twice: the partial sum out and back)."""
        chain = self.chains[X.name]
        out: Any = 0.0
        for c in chain[1:]:
            unit = self.net_unit[(X.name, c)]
            if unit:
                out = out + (per[(c, "fills")] + per.get((c, "drains"), 0.0)) * unit
        unit = self.net_unit[(X.name, self.nlev)]
        if unit:
            out = out + self.macs * (2 if X.is_output else 1) * unit
        return out

    def unfixed_steps(self, rem: dict[str, int], level: int) -> int:
        """Rule B17: the temporal iterations of the unfixed levels (below ``level``), when every fan-out is fixed
        (then exactly ``temporal_left``'s product); 0 when some fan-out is open (the rule is then not used)."""
        T, exact = self.temporal_left(rem, level)
        return math.prod(T.values()) if exact else 0

    def open_instances_above(self, c: int) -> int:
        """Instances of level ``c`` that fan-outs fixed in advance (``spatial``) give it: the unrolling of every
        fan-out above c. For a level above the node's fixed ones."""
        return math.prod(math.prod(cap.values()) for cap in self.spatial_cap[:c] if cap)

    def holds_only(self, X: Operand, c: int, tile: Any) -> Any:
        """Rule B17: can level c hold no tile of X larger than ``tile`` elements (its capacity, or X's partition, is
        below one element more, at X's fewest bits)? Then no loop over a dim X uses may be added at or below c. A
        number or an array of rows."""
        got = self._holds.get((X.name, c))
        if got is None:
            got = self._holds[(X.name, c)] = (self.arch.levels[c].capacity_for(X.cls), fewest_bits(X, self.arch))
        cap, bits = got
        if cap is None:
            return False
        return cap < (tile + 1) * bits

    def chain_stall_cycles(self, X: Operand, per: dict[tuple[int, str], Any], serial: dict[int, Any], w: int,
                           first: Any = 0.0) -> Any:
        """Rule B16: stall cycles that X's own transfers through its single-buffered levels force one after another
        (``cost.latency._transition_time``). At a tile change a level's load of X waits for X's load into its parent
        level, so where a single-buffered level c and its single-buffered parent p (adjacent in X's chain) both load,
        the two loads run in sequence: summed over the run, the stall is at least both levels' loads of X. The
        output's stores drain one after another, deepest level first, and a level's reload of partial sums waits
        for its own store: the stall is at least, for each single-buffered output level c, every store from c and
        the single-buffered levels below it plus c's reloads. A store takes at least its elements over the child's
        read port and over the parent's write port, both spread over all instances. ``per``: B1's counts of X
        ((level, kind) -> count), ``serial``: X's B9 load time per single-buffered level. Rule B56: for the output,
        ``first`` (the first tiles' loads, ``first_fill``) plus every store from its single-buffered levels. Returns
        the largest such sum (a number or an array of rows; 0 without any)."""
        chain = self.chains[X.name]
        best: Any = 0.0
        for p, c in pairwise(chain):
            if p in serial and c in serial:
                best = np.maximum(best, serial[p] + serial[c])
        if X.is_output:
            below: Any = 0.0
            for p, c in reversed(list(pairwise(chain))):
                if c not in self.serial_fill:
                    continue
                C, P = self.arch.levels[c], self.arch.levels[p]
                store: Any = 0.0
                if C.read_bw_bits is not None:
                    store = per[(c, "drains")] * w / C.instances / C.read_bw_bits
                if P.write_bw_bits is not None:
                    store = np.maximum(store, per[(p, "updates")] * w / P.instances / P.write_bw_bits)
                below = below + store
                best = np.maximum(best, below + serial.get(c, 0.0))
            best = np.maximum(best, first + below)
        return best

    def load_port_cycles(self, loads, w: int) -> tuple[dict[int, Any], dict[int, Any]]:
        """Per parent level p, the cycles of the loads ``loads`` ((parent, child, elements in, parent-side
        elements) of one operand of ``w`` bits) on p's read port, spread over all of p's instances: those a
        single-buffered child queues on it (rule B12) and all of them (rule B13). Numbers or arrays of rows."""
        queued: dict[int, Any] = {}
        on_port: dict[int, Any] = {}
        for p, c, _, out in loads:
            P = self.arch.levels[p]
            if P.read_bw_bits is None:
                continue
            t = out * w / P.instances / P.read_bw_bits
            on_port[p] = on_port.get(p, 0.0) + t
            if (p, c) in self.port_paced:
                queued[p] = queued.get(p, 0.0) + t
        return queued, on_port

    def stream_cycles(self, served):
        """Rule B11: the model's compute takes at least the MACs' streaming through each last level's port
        (every operand whose last level it is: its reads, and the output's updates), over the port's bandwidth
        spread over all instances. ``served``: (level, is read, bits), numbers or arrays of rows."""
        port: dict[tuple[int, bool], Any] = {}
        for lv, is_read, b in served:
            port[(lv, is_read)] = port.get((lv, is_read), 0.0) + b
        out: Any = 0.0
        for (lv, is_read), b in port.items():
            L = self.arch.levels[lv]
            bw = L.read_bw_bits if is_read else L.write_bw_bits
            if bw is not None:
                out = np.maximum(out, b / L.instances / bw)
        return out

    def edge_cycles(self, tile_at, level: int, terms: list[tuple[Operand, int, Any, Any]] | None = None):
        """Rule B10: cycles of the prologue and epilogue (the first load of each operand into a level that
        overlaps its transfers with compute, the output's last drain from it), at least; and (rule B13) the
        longest of the output's last drains alone. ``tile_at(X, c)``: X's tile at c with the fixed loops (exact
        for c >= ``level``, a lower bound above: tiles only grow), a number or an array of rows
        (``node_bounds``); the same arithmetic serves both. ``terms``: ``edge_cycle_terms`` of the same node, when the
        caller has them (rule B73 reads them too). Returns (prologue + epilogue, longest last drain)."""
        total: Any = 0.0
        drain: Any = 0.0
        for X, _, term, _ in self.edge_cycle_terms(tile_at, level) if terms is None else terms:
            total = total + term
            if X.is_output:
                drain = np.maximum(drain, term)
        return total, drain

    def edge_cycle_terms(self, tile_at, level: int) -> list[tuple[Operand, int, Any, Any]]:
        """Rule B10's terms one by one (``edge_cycles`` sums them): (operand, level c, cycles, whether the model
        surely overlaps c's transfers: True, or a mask of rows); a term is 0 where it does not."""
        out: list[tuple[Operand, int, Any, Any]] = []
        fits: dict[int, Any] = {}
        for X, c, setup, per, least in self.edge_terms:
            lv = self.arch.levels[c]
            ok: Any = True
            if not lv.refills_during_compute:
                # Double-buffered only when two of the mapping's tiles fit: known once c's tile is fixed.
                if c < level or not self.whole_tiles:
                    continue
                if c not in fits:
                    fits[c] = self._two_tiles_fit(tile_at, c)
                ok = fits[c]
            # The model charges a transfer its time times its first (last) tile's share of the elements it moves,
            # no more than all of them: at least min(tile, elements per instance) at the slower port.
            data = 0.0 if X.is_output and not self.whole_tiles else np.minimum(tile_at(X, c), least) * per
            term = setup + data
            term = term if ok is True else np.where(ok, term, 0.0)
            out.append((X, c, term, ok))
        return out

    def _two_tiles_fit(self, tile_at, c: int):
        """``cost.latency.overlapping`` of a level double-buffered when two tiles fit, from the fixed tiles at c."""
        lv = self.arch.levels[c]
        use: dict[str | None, Any] = {}
        for X in self.op.operands:
            if X.name in self.keep[c]:
                part = X.cls if lv.partitioned else None
                use[part] = use.get(part, 0) + tile_at(X, c) * X.bits
        ok: Any = True
        for part, bits in use.items():
            cap = lv.capacity_bits if part is None else lv.capacity_for(part)
            if cap is not None:
                ok = np.logical_and(ok, 2 * bits <= cap)
        return ok

    def open_level_floor(self, c: int) -> float:
        """Rules B8 and B35: energy that the boundaries into level ``c`` cost beyond what B1 charges them while no
        loop at or below c is fixed (every element once), for every mapping: the least, over every tile shape that
        fits c (extents dividing each dim), of the refetches rule B7's innermost-loop cases with rule B15's orders
        force on it (``open_level_energy``). Holds for every node whose fixed levels are all below c. Cached per
        level."""
        got = self._open_floor.get(c)
        if got is None:
            got = least_refill_energy(self, c)
            self._open_floor[c] = got
        return got

    def temporal_left(self, rem: dict[str, int], level: int) -> tuple[dict[str, int], bool]:
        """Per dim, the fewest temporal iterations the unfixed levels (below ``level``) can still give it: what is
        left over the most their fan-outs can unroll of it (exactly that when every fan-out is fixed); and whether
        every fan-out is fixed (then the unfixed spatial instances are ``prod(rem) / prod(T)`` exactly)."""
        key = (tuple(rem.items()), level)
        got = self._left.get(key)
        if got is not None:
            return got      # (shared: callers only read it)
        most, exact = self._open_most(level)
        out = {}
        for d, r in rem.items():
            out[d] = max(1, -(-r // most[d]))
        if len(self._left) > 100_000:
            self._left.clear()
        got = self._left[key] = (out, exact)
        return got

    def _open_most(self, level: int) -> tuple[dict[str, int], bool]:
        """Per dim, the most the fan-outs of the levels below ``level`` can unroll of it (its fixed unrolling where
        the fan-out is fixed in advance), and whether every such fan-out is fixed; kept per level."""
        got = self._left.get(level)
        if got is None:
            caps = self.spatial_cap[:level]
            got = self._left[level] = (
                {d: math.prod(self.fan_sizes[l] if cap is None else cap.get(d, 1) for l, cap in enumerate(caps))
                 for d in self.op.dim_names},
                all(cap is not None for cap in caps))
        return got

    def run_alternatives(self, rem: dict[str, int], level: int, full: int, *,
                         perfect: bool = True) -> list[dict[str, int]]:
        """Rules B7 and B15: the cases of the unfixed loops' order, each as the number of runs of the fixed nest
        (one per unfixed temporal iteration and instance, ``full`` in all) that start with a new first tile, per
        operand; every mapping below the node is in one case. B7: the operands that use the innermost unfixed
        temporal loop's dim as a plain index get every run. B15: the other operands in every order of their
        innermost plain unfixed loops; the k-th gets at least the instances times the temporal iterations of
        the dims the first k use as plain indices (``perfect``: else one run each)."""
        memo = (tuple(rem.values()), level, full, perfect)
        got = self._runs.get(memo)
        if got is not None:
            return got
        if not perfect and full != 1 and type(self)._innermost_alternatives is BoundContext._innermost_alternatives \
                and type(self)._run_cases is BoundContext._run_cases:
            # Without perfect factors ``full`` (rule I2's whole positions, one per node more often than not) enters
            # only as the runs of the innermost loop's users, every other operand getting one: the cases are those
            # of a placeholder for it (kept per rem and level), with ``full`` put in. Distinct from 1, it merges no
            # two cases the placeholder keeps apart. (A subclass that computes the cases otherwise gets them computed.)
            # The cases read rem only through which dims have a temporal loop left and which must (the
            # innermost loop's candidates, ``_innermost_alternatives`` without windows): the key.
            most, exact = self._open_most(level)
            shape = (level, _FULL, tuple(0 if r == 1 or (exact and r <= most[d]) else 1 if r <= most[d] else 2
                                         for d, r in rem.items()))
            cases = self._runs.get(shape)
            if cases is None:
                cases = self._runs[shape] = self._run_cases(rem, level, _FULL, perfect)
            out: list[dict[str, Any]] = [
                {name: full if v is _FULL else (full, v[1]) if isinstance(v, tuple) and v[0] is _FULL else v
                 for name, v in runs.items()} for runs in cases]
        else:
            out = self._run_cases(rem, level, full, perfect)
        if len(self._runs) > 100_000:
            self._runs.clear()
        self._runs[memo] = out
        return out

    def _run_cases(self, rem: dict[str, int], level: int, full: Any, perfect: bool) -> list[dict[str, Any]]:
        """``run_alternatives`` computed (``full`` may be a placeholder where ``perfect`` is False)."""
        T, exact = self.temporal_left(rem, level)
        # Rule B18 (with every fan-out fixed and whole tiles): the sliding-window users of the innermost loop's dim.
        cases = self._innermost_alternatives(rem, level, windows=exact and perfect and self.whole_tiles)
        if (frozenset(), ()) in cases:
            cases = [(frozenset(), ())]   # it gives every operand the fewest runs of any case
        S = full // math.prod(T.values()) if exact and perfect else 1
        out: list[dict[str, Any]] = []
        # (the same products for many orders of the operands: taken once per set of dims)
        products: dict[frozenset[str], int] = {}

        def product(dims: frozenset[str]) -> int:
            got = products.get(dims)
            if got is None:
                got = products[dims] = math.prod(T[d] for d in dims)
            return got

        for users, windows in cases:
            others = [X.name for X in self.op.operands if X.name not in users]
            for perm in itertools.permutations(others) if perfect else [tuple(others)]:
                runs: dict[str, Any] = dict.fromkeys(users, full)
                seen: frozenset[str] = frozenset()
                for name in perm:
                    seen |= self.plain[name]
                    own = product(self.plain[name])
                    runs[name] = S * product(seen) if perfect and own > 1 else S
                for name, d in windows:
                    runs[name] = (runs[name], d)
                if runs not in out:
                    out.append(runs)
        return out

    def _innermost_alternatives(self, rem: dict[str, int], level: int, *, windows: bool = False
                                ) -> list[tuple[frozenset[str], tuple[tuple[str, str], ...]]]:
        """Rule B7's cases: per dim that may have an unfixed temporal loop (more of it left than the unfixed
        fan-outs can unroll), the operands that use it as a plain index; the empty set when every unfixed loop
        may be spatial (then no temporal loop is left to be innermost). Each case also lists, with ``windows``
        (every fan-out fixed), the (operand, dim) pairs rule B18 counts in it (``window_runs.window_users``)."""
        out: list[tuple[frozenset[str], tuple[tuple[str, str], ...]]] = []
        caps = self.spatial_cap[:level]
        most_of, exact = self._open_most(level)
        forced = False
        still = {d for d, r in rem.items()
                 if r > 1 and r > math.prod(cap.get(d, 1) for cap in caps if cap is not None)} if windows else set()
        for d, r in rem.items():
            most = most_of[d]
            if r == 1 or (exact and r <= most):
                continue        # no temporal loop over d is left
            forced |= r > most
            alt = (frozenset(X.name for X in self.op.operands if d in self.plain[X.name]),
                   window_users(self.op, self.windows, self.loose, d, still) if windows else ())
            if alt not in out:
                out.append(alt)
        if not forced and (frozenset(), ()) not in out:
            out.append((frozenset(), ()))
        return out




def serial_fill_levels(arch: Accelerator) -> frozenset[int]:
    """Rule B9: levels that load with compute stopped under every mapping (single-buffered, not double-buffered
    when two tiles fit, and not streaming a tile kept for the whole run)."""
    return frozenset(i for i, lv in enumerate(arch.levels)
                     if not lv.refills_during_compute and not lv.double_buffered_when_fits and not lv.stream_single_tile)


def paced_by_parent(arch: Accelerator, p: int, c: int) -> bool:
    """Rule B12: is a load into c from p paced by p's read port (c's write port no slower, or unlimited)?"""
    read_bw, write_bw = arch.levels[p].read_bw_bits, arch.levels[c].write_bw_bits
    return read_bw is not None and (write_bw is None or write_bw >= read_bw)


def loose_operand(arch: Accelerator, X: Operand, chain) -> bool:
    """Is operand X, kept at the levels ``chain``, one the bound rules cannot count? They count as if every
    level had one instance per position of the fan-outs above it (not so past a level shared along a fan-out
    axis, ``Level.shared_axes``) and every index point moved (not so for a padded input whose halo the
    accelerator generates, ``padding: generated``). Such an operand gets no terms: weaker, still bounds."""
    return any(arch.levels[i].shared_axes for i in chain) or (
        arch.padding_generated and not X.is_output and bool(X.pad_lo) and any(X.pad_lo))


def network_unit(arch: Accelerator, X: Operand, lo: int, hi: int) -> float:
    """Rule B14: the network energy (pJ) the model charges per element of X moved between levels lo and hi, across
    every fan-out at levels lo..hi-1 (``hi`` = the number of levels: to and from the MACs)."""
    return sum(fanout_element_energy(lv, X.bits) for lv in arch.levels[lo:hi])


def fixed_spatial_merge(arch: Accelerator, spatial: list[Loop], X: Operand, lo: int, hi: int,
                        sizes: abc.Mapping[str, int] | None = None) -> int:
    """Product of the fixed spatial loops at levels lo..hi-1 over dims outside X that merge X's transfers: an
    output is reduced across them, an input multicast where the axis multicasts (the scalar and the batched node
    bound share this term). Given the operator's ``sizes`` (where tiles may be partial), each dim's product is capped
    at its size (rule B60: a padded unrolling's lanes past a dim's end are idle and merge nothing)."""
    if sizes is None:
        out = 1
        for l in spatial:
            if lo <= l.level < hi and l.dim not in X.dims:
                ax = arch.fanout_axis(l.level, l.axis)
                if X.is_output or ax.multicast:
                    out *= l.bound
        return out
    per: dict[str, int] = {}
    for l in spatial:
        if lo <= l.level < hi and l.dim not in X.dims:
            ax = arch.fanout_axis(l.level, l.axis)
            if X.is_output or ax.multicast:
                per[l.dim] = per.get(l.dim, 1) * l.bound
    return math.prod(min(b, sizes[d]) for d, b in per.items())


def fixed_spatial_lineage(spatial: list[Loop], X: Operand, p: int, sizes: abc.Mapping[str, int] | None = None) -> int:
    """Product of the fixed spatial loops below level p over dims outside X: the most instances one of X's tiles
    at p can serve through them (each dim's product capped at its size when ``sizes`` is given, rule B60)."""
    if sizes is None:
        return math.prod(l.bound for l in spatial if l.level < p and l.dim not in X.dims)
    per: dict[str, int] = {}
    for l in spatial:
        if l.level < p and l.dim not in X.dims:
            per[l.dim] = per.get(l.dim, 1) * l.bound
    return math.prod(min(b, sizes[d]) for d, b in per.items())

def entering_any_order(op: Operator, fixed: tuple[Loop, ...], free: frozenset[int], keep,
                       innermost: Loop | None = None, parts: dict[tuple[str, int], tuple] | None = None):
    """``(X, c) -> n``: a lower bound of ``entering_perfect`` of the nest ``fixed`` that holds for every order of
    the temporal loops at the levels ``free`` (the outermost levels of ``fixed``), for any boundary c (rule B3):
    only the free loops above c matter, the free levels at or below c shape the tile at c whatever their order.

    The loops of a free level f come after those of the free levels outside it and before every deeper loop,
    whatever the orders, and no deeper loop wraps them back. So the terms of the deeper loops are those of the
    nest without the free loops, times the product of all free loops. A free loop over a dim that X uses as a
    plain index moves X's tile by at least its extent at every step (its stride exceeds the span the inner loops
    over that dim wrap back), so each step brings a whole tile; at level f such steps number, over any order, at
    least (product of the free loops outside f) x (prod(B) - 1) over such loops of f, since each loop's prefix
    holds the loops of the outer levels and the others of its level before it. Other free loops bring at least
    nothing. Every free loop brings a whole tile at every step when some loop inside it, above c, runs over a
    plain dim of X at every one of its steps (it wraps that loop back): a fixed loop of a deeper level, or
    ``innermost``, when given: the loop assumed innermost of the innermost free level (rule B4).

    ``parts``: a memo of what the count of (X, c) reads of ``fixed`` and ``free`` but not of ``innermost``, which the
    caller keeps for one (``fixed``, ``free``) and shares between the bounds of its innermost loops."""
    own_all = [l for l in fixed if l.level in free and not l.spatial and l.bound > 1]
    levels = sorted(free)
    per_boundary: dict[int, tuple] = {}
    memo: dict[tuple[str, int], tuple] = {} if parts is None else parts

    def entering(X, c: int) -> float:
        got = memo.get((X.name, c))
        if got is None:
            got = memo[(X.name, c)] = _any_order_part(X, c)
        inst, tile, deeper_count, every_fixed, plain, per_level = got
        every = every_fixed or (innermost is not None and innermost.level < c and innermost.dim in plain)
        tiles, outer = 1, 1
        for own_plain, own_every in per_level:
            tiles += outer * ((own_every if every else own_plain) - 1)
            outer *= own_every
        return inst * tile * tiles + outer * (deeper_count - inst * tile)

    def _any_order_part(X, c: int) -> tuple:
        got = per_boundary.get(c)
        if got is None:
            # Only the open loops above c are taken out; open levels at or below c shape the tile at c.
            own = [l for l in own_all if l.level < c]
            mine = {id(l) for l in own}
            got = per_boundary[c] = (own, tuple(l for l in fixed if id(l) not in mine),
                                     math.prod(l.bound for l in fixed if l.spatial and l.level < c))
        own, deeper, inst = got
        plain = {ix.terms[0][0] for ix in X.indices if len(ix.terms) == 1}
        tile, deeper_count = _tile_and_entering(op, deeper, X.name, c)
        every_fixed = any(not l.spatial and l.bound > 1 and l.level not in free and l.level < c and l.dim in plain
                          for l in fixed)
        # Per free level above c, outermost first: the product of its loops over X's plain dims (the steps that bring
        # a whole tile unless every step does) and of all its loops.
        per_level = tuple((math.prod(l.bound for l in own if l.level == f and l.dim in plain),
                           math.prod(l.bound for l in own if l.level == f)) for f in levels if f < c)
        return inst, tile, deeper_count, every_fixed, plain, per_level

    return entering


# ``_tile_and_entering``'s memo, keyed by the operator's identity (hashing an operator walks all of it, about 10 us,
# as much as a lookup's other work): each operator keyed is held in ``_ENTERING_OPS``, so its id names no other
# operator while its entries live. Bounded: both are cleared past 200,000 entries.
_ENTERING: dict[tuple, tuple[int, int]] = {}
_ENTERING_OPS: dict[int, Operator] = {}


def _tile_and_entering(op: Operator, loops: tuple[Loop, ...], name: str, c: int) -> tuple[int, int]:
    """X's tile at c and ``entering_perfect`` of the nest ``loops``: the nest without the open loops is shared
    by every child of a node (and by every order, and every bypass choice: counts do not depend on it), so it is
    counted once."""
    key = (id(op), loops, name, c)
    got = _ENTERING.get(key)
    if got is None:
        if len(_ENTERING) > 200_000:
            _ENTERING.clear()
            _ENTERING_OPS.clear()
        _ENTERING_OPS[id(op)] = op
        X = op.operand(name)
        if not loops or loops[0].level >= c:
            # No loop above c (``entering_perfect`` stops at the first loop inside c): one instance brings its first
            # tile, the whole count (the open levels' loops taken out at a boundary under them, most often).
            ext = dict.fromkeys(op.sizes, 1)
            for l in loops:
                if l.level >= c:
                    ext[l.dim] *= l.bound
            t = tile_size(X, ext)
            got = _ENTERING[key] = (t, t)
        else:
            info = NestInfo(op, Mapping(loops, ()))
            got = _ENTERING[key] = (tile_size(X, info.inner_extents(c)), entering_perfect(info, X, c))
    return got


def chain_options(op: Operator, keeps: list[tuple[frozenset[str], ...]]) -> dict[str, list[list[int]]]:
    """Per operand, every set of levels that keeps it under some bypass choice of ``keeps``."""
    out: dict[str, list[list[int]]] = {}
    for X in op.operands:
        seen = {tuple(i for i, kp in enumerate(keep) if X.name in kp) for keep in keeps}
        out[X.name] = [list(c) for c in sorted(seen)]
    return out


def spatial_bounds(op: Operator, arch: Accelerator, merges: dict[str, np.ndarray], pes: np.ndarray,
                   chains: dict[str, list[list[int]]],
                   fits: dict[str, list[np.ndarray]] | None = None,
                   stall: tuple[np.ndarray, dict[str, list[np.ndarray]]] | None = None,
                   pinned: PinnedStall | None = None,
                   pairs: CombinationPairs | None = None,
                   ranking: list[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(energy, latency) lower bounds of every mapping with a given spatial unrolling (every fan-out
    fixed, nothing temporal), one per row: ``merges`` as ``spatial.group_merges`` gives them, ``pes`` the PEs
    each unrolls over; under any bypass choice whose per-operand level sets are in ``chains``.

    This is rule B1 with all fan-outs fixed and no temporal loop: every element of an operand enters
    each level that keeps it at least once; the innermost level that keeps an operand serves every MAC
    once per group of PEs its fan-outs merge; an output's first touch at a boundary saves at most one
    read per reduction lineage (the fan-outs above it). Energy is a sum of per-operand terms, each
    depending only on that operand's levels, so its minimum over bypass choices is the sum of
    per-operand minima. Latency is at least the MAC schedule over the unrolled PEs and at least any
    one operand's traffic over the ports it uses (the fewest its level sets allow): the larger of the
    two holds for every choice. ``fits`` (rule S6, ``unrolling_fit``): per operand and level set, the rows
    where the set can hold the operand's smallest tile; a set is left out of a row's minimum where it cannot.
    ``stall`` (rule S7, ``unrolling_stall``): the MAC schedule per row and, per operand and level set, its stall
    vector; each combination of level sets then also takes the schedule plus its summed stall (``shared_port_bound``).
    ``pinned`` (rule B24, ``pinned_stall``): per combination of level sets (one index per operand), the stall per row
    of the levels that hold one element; each combination also takes the schedule plus it. ``pairs`` (rule B25,
    ``combination_pairs``): filled with each combination's (energy, latency) pair, kept together for a scalar
    objective; the bounds returned are the unpaired ones (an energy bound and a latency bound, each valid alone).
    ``ranking``: given a list, it gets the latency per row with ``pinned``'s bound-only terms left out
    (``PinnedStall.ranking_cases``), the key E1 orders unrollings by, from the same pass.
    """
    return combined_spatial_bounds(op, arch, pes, operand_chain_terms(op, arch, merges, len(pes), chains, fits),
                                   stall, pinned, pairs, ranking)


def operand_chain_terms(op: Operator, arch: Accelerator, merges: dict[str, np.ndarray], rows: int,
                        chains: dict[str, list[list[int]]],
                        fits: dict[str, list[np.ndarray]] | None = None) -> list[list[tuple[Any, ...]]]:
    """``spatial_bounds``'s per-operand terms: per operand (``op.operands`` order), per level set of ``chains``, its
    (energy, reads [row, level] bits, writes [row, level] bits, busiest port's cycles, (reads, writes) of the MACs
    alone at its last level, rule B72) per row. Each is a function of that operand, that level set, the merges and its
    fits alone."""
    nlev = len(arch.levels)
    macs = op.macs
    init_read = 1 if op.init_output == "read" else 0
    out: list[list[tuple[Any, ...]]] = []
    for X in op.operands:
        fp = op.footprint(X)
        M = merges[X.name]
        inner = np.concatenate([np.ones((len(M), 1)), np.cumprod(M, axis=1)], axis=1)  # prod of levels < l
        out.append([])
        for j, chain in enumerate(chains[X.name]):
            reads = np.zeros((rows, nlev))
            writes = np.zeros((rows, nlev))
            e = np.zeros(rows)
            stream = (np.zeros((rows, nlev)), np.zeros((rows, nlev)))
            if loose_operand(arch, X, chain):      # not counted by these rules: no terms (still a bound)
                if fits is not None:
                    e, reads, writes = _left_out(fits[X.name][j], e, reads, writes)
                out[-1].append((e, reads, writes, np.where(np.isfinite(e), 0.0, np.inf), stream))
                continue

            def charge(level: int, kind: str, count, *, X: Operand = X, reads: np.ndarray = reads,
                       writes: np.ndarray = writes) -> None:
                nonlocal e
                L = arch.levels[level]
                s = fewest_bits(X, arch) / L.width_bits
                if kind == "read":
                    e = e + count * L.read_energy_pj * s
                    reads[:, level] += count * fewest_bits(X, arch)
                else:
                    e = e + count * L.write_energy_pj * s
                    writes[:, level] += count * fewest_bits(X, arch)

            for p, c in pairwise(chain):
                unit = network_unit(arch, X, p, c)        # rule B14
                if X.is_output:
                    down = np.maximum(0.0, fp - fp * (inner[:, p] - init_read))
                    charge(c, "write", down)      # fills
                    charge(p, "read", down)
                    charge(c, "read", fp)         # drains
                    charge(p, "write", fp)        # updates
                    e = e + (down + fp) * unit
                else:
                    charge(c, "write", fp)
                    charge(p, "read", fp)
                    e = e + fp * unit
            last = chain[-1]
            e = e + macs * (2 if X.is_output else 1) * network_unit(arch, X, last, nlev)
            served = macs / (inner[:, nlev] / inner[:, last])
            if X.is_output:
                charge(last, "write", served)
                charge(last, "read", np.maximum(0.0, served - fp * (inner[:, last] - init_read)))
                stream[1][:, last] = served * fewest_bits(X, arch)
                stream[0][:, last] = np.maximum(0.0, served - fp * (inner[:, last] - init_read)) * fewest_bits(X, arch)
            else:
                charge(last, "read", served)
                stream[0][:, last] = served * fewest_bits(X, arch)
            if fits is not None:
                e, reads, writes = _left_out(fits[X.name][j], e, reads, writes)
            out[-1].append((e, reads, writes, busiest_port(arch, reads, writes, rows), stream))
    return out


def combined_spatial_bounds(op: Operator, arch: Accelerator, pes: np.ndarray,
                            terms: list[list[tuple[Any, ...]]],
                            stall: tuple[np.ndarray, dict[str, list[np.ndarray]]] | None = None,
                            pinned: PinnedStall | None = None,
                            pairs: CombinationPairs | None = None,
                            ranking: list[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``spatial_bounds`` from its per-operand terms (``operand_chain_terms``): energy the least per operand summed,
    latency the MAC schedule, each operand's least port time and rule S3's combinations (``ranking`` as in
    ``spatial_bounds``)."""
    energy = np.full(len(pes), op.macs * arch.compute.mac_energy_pj, dtype=np.float64)
    latency = np.ceil(np.ceil(op.macs / pes) / arch.compute.macs_per_cycle)
    if stall is not None:
        latency = np.maximum(latency, stall[0])      # (a padded unrolling's schedule: rule B32)
    # Each operand's read and write traffic per level, per level set it may take (rule S3 below).
    traffic: list[list[tuple[np.ndarray, np.ndarray]]] = []
    energies: list[list[np.ndarray]] = []      # per operand, per level set: its energy per row (rule B25)
    streams: list[list[tuple[np.ndarray, np.ndarray]]] = []      # per operand, per level set: rule B72's MAC side
    base_energy = energy.copy()
    for per_set in terms:
        best_e = np.full(len(pes), np.inf)
        best_t = np.full(len(pes), np.inf)
        for e, _, _, transfer, _ in per_set:
            best_e = np.minimum(best_e, e)
            best_t = np.minimum(best_t, transfer)
        traffic.append([(reads, writes) for _, reads, writes, _, _ in per_set])
        streams.append([stream for *_, stream in per_set])
        energies.append([e for e, _, _, _, _ in per_set])
        energy += best_e
        latency = np.maximum(latency, best_t)
    stall_vectors = None if stall is None else [stall[1][X.name] for X in op.operands]
    # Rule B25 (``combination_pairs``): for a scalar objective, each combination of level sets keeps its energy and
    # latency together.
    if pairs is not None:
        pairs.start(base_energy, energies, latency)
    bound = shared_port_bound(arch, traffic, len(pes), stall_vectors, None if stall is None else stall[0], pinned,
                              pairs, streams if MAC_STREAM_STALL else None, ranking)
    if ranking is not None:
        ranking[-1] = np.maximum(latency, ranking[-1])
    return energy, np.maximum(latency, bound)


def _left_out(ok: np.ndarray, e: np.ndarray, reads: np.ndarray, writes: np.ndarray):
    """Rule S6: a level set no mapping of the row can use costs infinitely much there (out of every minimum)."""
    bad = ~ok
    return (np.where(bad, np.inf, e), np.where(bad[:, None], np.inf, reads), np.where(bad[:, None], np.inf, writes))


# Rule B72 (docs/mapper.md): S1's stall adds to the MACs' streaming as well as to the MAC schedule (a switch for the
# tests that measure the rules before it).
MAC_STREAM_STALL = True

# Combinations of per-operand level sets above which rule S3 takes each operand's least traffic per level
# instead of the least over combinations (weaker, as cheap as one combination).
PORT_COMBINATIONS = 512


def shared_port_bound(arch: Accelerator, traffic: list[list[tuple[np.ndarray, np.ndarray]]], rows: int,
                      stall: list[list[np.ndarray]] | None = None, compute: np.ndarray | None = None,
                      pinned: PinnedStall | None = None,
                      pairs: CombinationPairs | None = None,
                      streams: list[list[tuple[np.ndarray, np.ndarray]]] | None = None,
                      ranking: list[np.ndarray] | None = None) -> np.ndarray:
    """Rule S3: a level's port carries the sum over operands of their traffic, each operand's depending only
    on its own level set. ``traffic``: per operand, per level set it may take, (reads, writes) as [row, level]
    bits. The least over every combination of level sets of the busiest port's cycles (over its bandwidth
    spread over all instances), or, past PORT_COMBINATIONS combinations, the busiest port of each operand's
    least traffic per level. With ``stall`` (rule S7: per operand, per level set, a constant vector of stall cycles) and
    ``compute`` (the MAC schedule per row), each combination also takes ``compute`` plus its summed vector's largest
    entry (past PORT_COMBINATIONS, each operand's least vector per entry). With ``pinned`` (rule B24) and ``compute``,
    each combination (one level-set index per operand) also takes ``compute`` plus ``pinned(indices)`` (not past
    PORT_COMBINATIONS: leaving it out there keeps the bound a bound). ``pairs`` (rule B25) is told each combination's
    cycles (not past PORT_COMBINATIONS: it then stays incomplete). With ``streams`` (rule B72: per operand, per level
    set, the MACs' (reads, writes) at its last level, as [row, level] bits), the stall adds to the larger of ``compute``
    and the combination's streaming through those ports (rule B11), not to ``compute`` alone. ``ranking``: given a
    list, the same least with ``pinned.ranking_cases`` in place of ``pinned.cases`` is appended to it
    (``spatial_bounds``)."""
    n_comb = math.prod(len(t) for t in traffic)
    stalls = stall if stall is not None else [[np.zeros(1)] * len(t) for t in traffic]
    flows = streams if streams is not None else [[(np.zeros((rows, 1)), np.zeros((rows, 1)))] * len(t)
                                                 for t in traffic]
    if n_comb > PORT_COMBINATIONS:
        combos = [[(np.minimum.reduce([r for r, _ in t]), np.minimum.reduce([w for _, w in t]))] for t in traffic]
        stalls = [[np.minimum.reduce(v)] for v in stalls]
        flows = [[(np.minimum.reduce([r for r, _ in t]), np.minimum.reduce([w for _, w in t]))] for t in flows]
    else:
        combos = traffic
    best = np.full(rows, np.inf)
    ranked = np.full(rows, np.inf)
    picks = itertools.product(*(range(len(t)) for t in combos))
    for index, pick, vecs, flow in zip(picks, itertools.product(*combos), itertools.product(*stalls),
                                       itertools.product(*flows), strict=True):
        reads = sum(r for r, _ in pick)
        writes = sum(w for _, w in pick)
        cycles = port = busiest_port(arch, reads, writes, rows)
        # Rule B33 (``pinned_cases``): the pinned levels' cases, each with the energy its refills add; one case, B24's
        # stall, without it.
        splits: list[tuple[np.ndarray | None, np.ndarray]] = [(None, cycles)]
        ranking_splits = None
        if compute is not None:
            # Rule B72: the model's stall adds to its compute, the larger of the MAC schedule and the MACs' streaming.
            busy = compute if streams is None else \
                np.maximum(compute, busiest_port(arch, sum(r for r, _ in flow), sum(w for _, w in flow), rows))
            cycles = np.maximum(port, busy + float(sum(vecs).max()))
            splits = [(None, cycles)]
            # E1's ranking key leaves out the bound-only terms, B72's streaming and ``pinned.ranking_cases``' (B64):
            # a stronger bound must not reorder the unrollings (measured: it made the best found worse at the limit).
            ranked_cycles = np.maximum(port, compute + float(sum(vecs).max()))
            ranking_splits = [ranked_cycles]
            if pinned is not None and combos is traffic:
                splits = [(extra, np.maximum(cycles, busy + stall)) for extra, stall in pinned.cases(index)]
                if ranking is not None:
                    plain = pinned.ranking_cases(index)
                    ranking_splits = [np.maximum(ranked_cycles, compute + stall)
                                      for _, stall in (plain if plain is not None else pinned.cases(index))]
        for extra, case_cycles in splits:
            if pairs is not None and combos is traffic:
                pairs.add(index, case_cycles, extra)
            best = np.minimum(best, case_cycles)
        if ranking is not None:
            ranked = np.minimum.reduce([ranked, *(ranking_splits or [c for _, c in splits])])
    if ranking is not None:
        ranking.append(ranked)
    return best


def busiest_port(arch: Accelerator, reads: np.ndarray, writes: np.ndarray, rows: int) -> np.ndarray:
    """Cycles of the busiest port per row for [row, level] bits read and written, each level's bandwidth
    spread over all its instances (the fewest cycles that traffic can take)."""
    busiest = np.zeros(rows)
    for i, L in enumerate(arch.levels):
        if L.read_bw_bits is not None:
            busiest = np.maximum(busiest, reads[:, i] / L.instances / L.read_bw_bits)
        if L.write_bw_bits is not None:
            busiest = np.maximum(busiest, writes[:, i] / L.instances / L.write_bw_bits)
    return busiest
