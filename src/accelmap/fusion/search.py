"""Where to cut a chain into fused groups, and each group's tile and halo policy.

Every group of consecutive operators (up to ``max_group``) is tried with every halo mode, with the
operators' weights refetched by every tile or (where the store holds weights) kept in it, or refetched with only
the producers' outputs (attention's K and V) kept, per row tile the largest head tile that fits (attention tiled
over heads), the
column tiles of ``tile_candidates`` and, per (mode, column tile), the ``per_mode`` largest row
tiles whose buffers fit the store (larger tiles recompute and refetch less; smaller ones only win
on buffer space, which the fitting ones already have). A single operator is the layer as the
model maps it alone (layer by layer). A chain's plans are combined by dynamic programming over
the cut points, keeping at every cut the energy-latency Pareto front of the plans up to it, so
the best plan for energy, latency and EDP (of the chain or, folded across chains, of the whole
model) is exact over the candidates tried. Layer-by-layer is one of those plans, so the fused
result is never worse.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import time
from dataclasses import dataclass, replace

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import SpecError
from accelmap.fusion.chain import FusableChain
from accelmap.fusion.geometry import MODES, AxisSchedule, Join, Stage, fused_counts, head_runs, schedules
from accelmap.fusion.group_cost import (
    GroupCost,
    InnerMappings,
    KeptProducers,
    Producer,
    TileBounds,
    group_cost,
    group_lower_bound,
    pass_energy,
    producers_on_chip,
    reserved,
    resident_weight_bits,
    shared_port_bandwidth,
    skip_energy,
    store_index,
    tile_candidates,
    transfer_energy,
    vector_cycles,
)
from accelmap.fusion.stages import MacStage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FusionConfig:
    max_group: int = 8          # operators in one fused group at most
    row_tiles: int = 8          # row tile sizes tried: the whole output, then halves
    col_tiles: int = 3          # column tile sizes tried (convolutions): the whole width, then halves
    per_mode: int = 2           # largest fitting row tiles costed per (mode, column tile)
    # Exact tile search: every tile size (rows x columns) whose buffers fit, costed in the order of
    # its lower bound and pruned by it, in groups whose output has at most ``exact_max_tiles``
    # positions; each group's search stops after ``exact_group_seconds`` (its rest stays a bound).
    exact_tiles: bool = False
    exact_max_tiles: int = 4096
    exact_group_seconds: float = 60.0
    front_limit: int | None = 64  # points kept per Pareto front (None: all; thinning voids the certificate)
    # Join consecutive residual blocks into one chain, so that a group may span them (the first add's
    # result kept on chip for the next block and the next add). Off by default (docs/fusion.md, "Groups
    # spanning residual blocks": more groups to search, the measured gains small).
    span_residuals: bool = False
    # Inside a spanning group each inner skip is kept or re-read, every combination costed up to this many
    # (then: all kept, all re-read, and each one re-read alone).
    max_join_combinations: int = 16
    # A group may run the producers of its second operands (attention's K, V) just before it, their outputs left
    # in the store (``group_cost.producers_on_chip``); ``accelmap compile --fuse`` runs that too.
    producers_on_chip: bool = True
    # Attention tiled over heads (``geometry.head_segment``): a group holding one run of head-split stages (the
    # scores and context) may run them per head tile, every divisor of the heads tried (the default search: per
    # row tile the largest head tile whose buffers fit; the exact one: all).
    head_tiles: bool = True
    # One off-chip port for reads and writes (AccelForge's main memory) instead of one each way: the groups'
    # pipelines, bounds and the host passes run alone share it, and a layer alone takes at least its off-chip
    # bits over that port (``fusion.model_fusion``).
    shared_offchip_port: bool = False


DEFAULT_FUSION = FusionConfig()
# Every tile size; fronts kept whole up to a size no real chain reaches (thinning voids the certificate).
EXACT_FUSION = FusionConfig(exact_tiles=True, front_limit=4096)


@dataclass(frozen=True)
class Single:
    """One operator run alone, as the layer-by-layer mapping costs it."""

    node: str
    energy: float
    latency: float
    offchip_bits: int
    fmap_bits: int


Choice = GroupCost | Single


@dataclass(frozen=True)
class Point:
    energy: float
    latency: float
    offchip_bits: int
    choices: tuple[Choice, ...]

    def objective(self, name: str) -> float:
        return {"energy": self.energy, "latency": self.latency, "edp": self.energy * self.latency,
                "pareto": self.energy * self.latency}[name]


def pareto(points: list[Point], keep: int | None = 64) -> list[Point]:
    """The non-dominated points (energy, latency), lowest energy first; at most ``keep`` (None: all),
    spread evenly (the lowest energy and the lowest latency always among them)."""
    pts = sorted(points, key=lambda p: (p.energy, p.latency, p.offchip_bits))
    front: list[Point] = []
    for p in pts:
        if not front or p.latency < front[-1].latency:
            front.append(p)
    if keep is not None and len(front) > keep:
        step = (len(front) - 1) / (keep - 1)
        front = [front[round(i * step)] for i in range(keep)]
    return front


@dataclass
class SearchLog:
    groups_tried: int = 0
    candidates_costed: int = 0
    candidates_rejected: int = 0
    seconds: float = 0.0
    groups_skipped: int = 0     # groups not (fully) tried because the search's time limit had passed
    timed_out: bool = False
    candidates_pruned: int = 0      # exact tile search: dominated by their lower bound
    candidates_unresolved: int = 0  # exact tile search: neither costed nor pruned (their bounds are kept)
    inexact_groups: int = 0         # exact tile search asked, but too many tile sizes: the halves only
    fronts_thinned: bool = False    # a Pareto front had more than ``front_limit`` points


def out_of_time(deadline: float | None, stats: SearchLog) -> bool:
    """Whether the search's deadline (``time.perf_counter()`` seconds) has passed; remembered in ``stats``."""
    if deadline is not None and time.perf_counter() >= deadline:
        stats.timed_out = True
    return stats.timed_out and deadline is not None


def join_variants(join: Join | None) -> list[tuple[Join | None, str]]:
    """How a group ending the chain may treat its join: keep a skip the group holds, re-read it, or
    leave the join out (it runs alone after the group); without a join, the plain group. A skip that is
    an intermediate of the group is never written to memory, so it can only be kept."""
    if join is None:
        return [(None, "re-read")]
    if join.skip is not None and join.skip > 0:
        return [(join, "kept")]
    return ([(join, "kept")] if join.skip is not None else []) + [(None, "re-read"), (join, "re-read")]


def skip_options(join: Join) -> tuple[str, ...]:
    """How a join inside a group may read its skip: an intermediate of the group (never in memory) kept, the
    group's input kept or re-read, a skip from outside re-read."""
    return ("re-read",) if join.skip is None else ("kept",) if join.skip > 0 else ("kept", "re-read")


def inner_join_variants(joins: tuple[Join, ...], limit: int = 16) -> list[tuple[tuple[Join, str], ...]]:
    """How a group treats the joins inside it (it must run them: their results feed its next stage): each
    skip kept or re-read, chosen per join where both can be (``skip_options``). Every
    combination while there are at most ``limit``; beyond, every skip kept, every skip re-read, and each
    join re-read alone with the others kept."""
    options = [skip_options(j) for j in joins]
    if math.prod(len(o) for o in options) <= limit:
        return [tuple(zip(joins, pick, strict=True)) for pick in itertools.product(*options)]
    kept = tuple((j, o[0]) for j, o in zip(joins, options, strict=True))
    out = [kept, tuple((j, o[-1]) for j, o in zip(joins, options, strict=True))]
    out += [kept[:i] + ((j, o[-1]),) + kept[i + 1:] for i, (j, o) in enumerate(zip(joins, options, strict=True))]
    return list(dict.fromkeys(out))


def keeps_more(a: tuple[tuple[Join | None, str], ...], b: tuple[tuple[Join | None, str], ...]) -> bool:
    """Whether treatment ``a`` of a group's joins keeps at least what ``b`` keeps and differs only by
    keeping skips that ``b`` re-reads or leaves out (``None``: the ending join left out of the group)."""
    return a != b and all(x == y or x[1] == "kept" for x, y in zip(a, b, strict=True))


def _treatment(inner: tuple[tuple[Join, str], ...], join: Join | None, skip_policy: str,
               chain_join: Join | None) -> tuple[tuple[Join | None, str], ...]:
    """Every join's treatment in one candidate: the inner ones, then the ending one (left out: ``None``)."""
    end: tuple[tuple[Join | None, str], ...] = () if chain_join is None else ((join, skip_policy if join else "out"),)
    return tuple(inner) + end


def _computed(sched: tuple[AxisSchedule, AxisSchedule]) -> tuple:
    """What each tile computes and fetches, per axis: with the same, two candidates run the same blocks."""
    return sched[0].comp, sched[1].comp


def _join_options(stages: tuple[Stage, ...], tr: int, tc: int, policies: tuple[str, ...], join: Join | None,
                  inner_joins: tuple[Join, ...], limit: int, head_tile: int | None = None) -> list:
    """Per treatment of the group's joins the model covers at this tile: (ending join or None, its skip
    policy, the inner joins with theirs, the counts, the row and column schedules' computed parts)."""
    out = []
    for ij in inner_join_variants(inner_joins, limit):
        for j, sp in join_variants(join):
            try:
                counts = fused_counts(stages, tr, tc, policies, j, sp, ij, head_tile)
                rows_s, cols_s = schedules(stages, tr, tc, policies, j, sp, ij)
            except SpecError:
                continue        # a kept skip the model does not cover here: the other treatments remain
            out.append((j, sp, ij, counts, (rows_s, cols_s)))
    return out


@dataclass(frozen=True)
class _Candidate:
    resident: bool
    policies: tuple[str, ...]
    tile_rows: int
    tile_cols: int
    join: Join | None
    skip_policy: str
    bound: tuple[float, float] = (0.0, 0.0)
    inner_joins: tuple[tuple[Join, str], ...] = ()
    head_tile: int | None = None
    keep_producers: bool = False    # weights streamed, the producers' outputs kept in the store


def head_tile_options(stages: tuple[Stage, ...], join: Join | None, inner_joins: tuple[Join, ...],
                      cfg: FusionConfig) -> list[int | None]:
    """The head tiles a group may take, largest first: None (all heads at once), then every proper divisor of
    the heads of its one run of head-split stages (none with a residual join: not modeled)."""
    runs = head_runs(stages)
    if not cfg.head_tiles or len(runs) != 1 or join is not None or inner_joins:
        return [None]
    heads = stages[runs[0][0]].heads
    return [None, *(d for d in range(heads - 1, 0, -1) if heads % d == 0)]


def _enumerate(stages: tuple[Stage, ...], macs: dict[int, MacStage], arch: Accelerator, join: Join | None,
               cfg: FusionConfig, exact: bool, inner_joins: tuple[Join, ...] = (),
               kept: KeptProducers | None = None, norms: tuple[tuple[int, int], ...] = ()) -> list[_Candidate]:
    """The group's candidates whose buffers fit the store, with their lower bounds when ``exact`` (``norms``: the
    group's normalizations, timed in the bounds as in the cost; ``kept``: the
    producers leaving second operands in the store when the weights are resident)."""
    out_last = stages[-1]
    if exact:
        cols = list(range(out_last.out_cols, 0, -1))
        row_sizes = list(range(out_last.out_rows, 0, -1))
    else:
        cols = tile_candidates(out_last.out_cols, cfg.col_tiles) if out_last.out_cols > 1 else [1]
        row_sizes = tile_candidates(out_last.out_rows, cfg.row_tiles)
    # Without a window wider than one row or column (matrix products along tokens) no halo exists,
    # and every mode is the same plan.
    halo = any(s.rows.span > 1 or s.cols.span > 1 for s in stages)
    # Weights kept in the store for all tiles, where it holds them: fewer refetches, less room for tiles. With
    # producers leaving second operands in the store (``kept``), a group streaming its weights may keep those alone.
    holds_w = "W" in arch.levels[store_index(arch)].holds
    residency = ([(False, False)] + ([(False, True)] if holds_w and kept and kept.names else [])
                 + ([(True, True)] if holds_w else []))
    found: list[_Candidate] = []
    heads = head_tile_options(stages, join, inner_joins, cfg)
    for resident, keeps in residency:
        extra = resident_weight_bits(macs) if resident else kept.operand_total if keeps and kept else 0
        for mode in MODES if halo else ("fully-cached",):
            policies = (mode,) * len(stages)
            for tc in cols:
                fitting = 0
                fitted_row: tuple[int, int] | None = None   # the last (row tile, column tile) fitting, any head tile
                for tr, ht in ((tr, ht) for tr in row_sizes for ht in heads):
                    if not exact and fitted_row == (tr, tc):
                        continue        # a larger head tile of this row tile fits: the default search takes it
                    options = _join_options(stages, tr, tc, policies, join, inner_joins, cfg.max_join_combinations, ht)
                    # A treatment of the joins is left out where another keeps more skips with the same tile
                    # schedule and the same room left in the store: the same tiles, mapped alike, with less
                    # off-chip traffic, energy and load time (keeping dominates re-reading, or running alone).
                    room: list[int | None] = []         # of the store taken, per treatment (None: no fit)
                    for o in options:
                        got = reserved(arch, o[3].buffer_total_bits + extra)
                        room.append(None if got is None else got[1])
                    fits = False
                    for k, (j, sp, ij, counts, sched) in enumerate(options):
                        if room[k] is None:
                            continue
                        if any(keeps_more(_treatment(o[2], o[0], o[1], join), _treatment(ij, j, sp, join))
                               and _computed(o[4]) == _computed(sched) and room[m] == room[k]
                               for m, o in enumerate(options)):
                            continue
                        bound = (0.0, 0.0)
                        if exact:
                            rows_s, cols_s = sched
                            bound = group_lower_bound(stages, macs, arch, counts, rows_s, cols_s, resident, j, sp,
                                                      inner_joins=ij, kept=kept if keeps else None, head_tile=ht,
                                                      shared_port=cfg.shared_offchip_port, norms=norms)
                        found.append(_Candidate(resident, policies, tr, tc, j, sp, bound, ij, ht,
                                                keeps and not resident))
                        fits = True
                    if fits:
                        fitted_row = (tr, tc)
                    fitting += fits
                    if not exact and fitting >= cfg.per_mode:
                        break
    return found


def group_producers(chain: FusableChain, first: int, last: int,
                    producers: dict[str, Producer] | None) -> dict[int, Producer]:
    """The producers (outside the chain) of the second operands of the group ``first..last``'s operators
    (attention's K and V projections), by the group's stage index."""
    if not producers or not chain.producers:
        return {}
    a = chain.mac_at[first]
    return {chain.mac_at[k] - a: replace(producers[p], reads_group_input=chain.producer_reads_input(first, k))
            for k in range(first, last + 1) for p in (chain.producers[k],) if p is not None and p in producers}


def group_candidates(chain: FusableChain, first: int, last: int, arch: Accelerator, inner: InnerMappings,
                     cfg: FusionConfig, stats: SearchLog, deadline: float | None = None,
                     unresolved: list[tuple[float, float]] | None = None,
                     producers: dict[str, Producer] | None = None) -> list[GroupCost]:
    """The group's costed plans; past ``deadline`` no further plan is costed (``stats`` says so).

    With ``cfg.exact_tiles`` (and at most ``cfg.exact_max_tiles`` tile sizes) every tile size is a
    candidate: they are costed, after the default search's candidates, in the order of their lower
    bound (``group_lower_bound``), and one whose
    bound is dominated by a plan already costed is pruned (no mapping of it can do better). Candidates
    neither costed nor pruned when ``cfg.exact_group_seconds`` or the deadline pass, and those whose
    tiles the mapper could not map within its limit, add their bounds to ``unresolved``.
    """
    stages, macs = chain.group(first, last)
    join = chain.group_join(first, last)
    inner_joins = chain.group_inner_joins(first, last)
    out_last = stages[-1]
    exact = cfg.exact_tiles and out_last.out_rows * out_last.out_cols <= cfg.exact_max_tiles
    if cfg.exact_tiles and not exact:
        stats.inexact_groups += 1
    # Second operands produced outside the group (attention's K, V), by stage index: with the weights resident
    # their producers may leave them in the store (the same for every tile: found once, for the bounds too).
    produced = group_producers(chain, first, last, producers)
    kept = producers_on_chip(arch, produced, macs) if produced else KeptProducers()
    cands = _enumerate(stages, macs, arch, join, cfg, exact, inner_joins, kept, chain.group_norms(first, last))
    if exact:
        # The default search's candidates first (so that a search cut by its time limit is no worse than
        # it), then the rest in the order of their bound.
        seeds = {replace(c, bound=(0.0, 0.0)) for c in _enumerate(stages, macs, arch, join, cfg, False, inner_joins)}
        cands.sort(key=lambda c: (replace(c, bound=(0.0, 0.0)) not in seeds, c.bound[0] * c.bound[1], c.bound))
    found: list[GroupCost] = []
    group_deadline = time.perf_counter() + cfg.exact_group_seconds if exact else None
    tile_bounds = tile_bounds_of(arch) if exact else None
    for i, c in enumerate(cands):
        if exact and any(g.energy <= c.bound[0] and g.latency <= c.bound[1] for g in found):
            stats.candidates_pruned += 1
            continue
        late = group_deadline is not None and time.perf_counter() >= group_deadline
        if exact and tile_bounds is not None and tile_bounds.usable and not late:
            # The certified bounds of its tiles, found only for the candidates the cheap bound leaves.
            rows_s, cols_s = schedules(stages, c.tile_rows, c.tile_cols, c.policies, c.join, c.skip_policy,
                                       c.inner_joins)
            counts = fused_counts(stages, c.tile_rows, c.tile_cols, c.policies, c.join, c.skip_policy, c.inner_joins,
                                  c.head_tile)
            tight = group_lower_bound(stages, macs, arch, counts, rows_s, cols_s, c.resident, c.join, c.skip_policy,
                                      tile_bounds, c.inner_joins, kept if c.resident or c.keep_producers else None,
                                      c.head_tile, cfg.shared_offchip_port, chain.group_norms(first, last))
            c = cands[i] = replace(c, bound=(max(tight[0], c.bound[0]), max(tight[1], c.bound[1])))
            if any(g.energy <= c.bound[0] and g.latency <= c.bound[1] for g in found):
                stats.candidates_pruned += 1
                continue
        if late or out_of_time(deadline, stats):
            stats.groups_skipped += 0 if late else 1     # cut short: some of its plans were not costed
            if exact and unresolved is not None:
                rest = [d.bound for d in cands[i:]
                        if not any(g.energy <= d.bound[0] and g.latency <= d.bound[1] for g in found)]
                unresolved.extend(rest)
                stats.candidates_unresolved += len(rest)
            return found
        got = group_cost(stages, macs, arch, c.tile_rows, c.tile_cols, c.policies, inner, c.resident, c.join,
                         c.skip_policy, c.inner_joins, produced, kept, c.head_tile, cfg.shared_offchip_port,
                         c.keep_producers, chain.group_norms(first, last))
        if isinstance(got, str):
            stats.candidates_rejected += 1
            if exact and unresolved is not None:
                # Not proven infeasible: the tile mapper may only have run out of its time.
                unresolved.append(c.bound)
                stats.candidates_unresolved += 1
            log.debug("%s..%s %dx%d %s: %s", chain.nodes[first], chain.nodes[last], c.tile_rows, c.tile_cols,
                      c.policies[0], got)
        else:
            stats.candidates_costed += 1
            found.append(got)
    return found


@functools.lru_cache(maxsize=8)
def tile_bounds_of(arch: Accelerator) -> TileBounds:
    """The certified tile bounds on ``arch``, shared by every group searched on it."""
    return TileBounds(arch)


def join_alone(chain: FusableChain, arch: Accelerator) -> Single | None:
    """The chain's residual add run after its last operator, outside any group: it reads its skip
    tensor from off-chip memory (through the store), at the off-chip read bandwidth."""
    return joins_alone(chain, arch).get(len(chain.nodes) - 1)


def joins_alone(chain: FusableChain, arch: Accelerator) -> dict[int, Single]:
    """Every join of the chain run alone, by the index of the operator it follows."""
    bw = arch.levels[0].read_bw_bits
    out = {}
    for m, j in chain.joins_after().items():
        bits = chain.join_bits_of(j)
        out[m] = Single(j.name, skip_energy(arch, bits, False), bits / bw if bw else 0.0, bits, bits)
    return out


def norms_alone(chain: FusableChain, arch: Accelerator, shared_port: bool = False) -> dict[int, tuple[Single, ...]]:
    """Every normalization of the chain run alone, by the index of the operator after it: it reads the
    previous operator's output from off-chip memory and writes its own result back, staged in the on-chip
    level next to the units (``pass_energy``), the read and the write at their own bandwidths, overlapped. A
    plan whose piece starts at that operator pays it; inside a group it applies as the tile is written, like
    element-wise work. ``shared_port``: the read and the write take turns on one off-chip port. Where the
    accelerator describes a vector unit (``vector_cycles``), the pass takes at least its elements over it."""
    top = arch.levels[0]
    out = {}
    for k in range(1, len(chain.nodes)):
        names = chain.norms_before(k)
        if names:
            rd, wr = chain.norm_bits(k)
            if shared_port:
                bw = shared_port_bandwidth(top)
                lat = (rd + wr) / bw if bw else 0.0
            else:
                lat = max(rd / top.read_bw_bits if top.read_bw_bits else 0.0,
                          wr / top.write_bw_bits if top.write_bw_bits else 0.0)
            # the vector unit normalizes the elements as they stream through: the slower of it and the port
            lat = max(lat, vector_cycles(arch, chain.norm_elements(k)))
            out[k] = tuple(Single(nm, pass_energy(arch, rd, wr), lat, rd + wr, rd + wr) for nm in names)
    return out


def group_floor(stages: tuple[Stage, ...], arch: Accelerator, kept: KeptProducers | None = None,
                shared_port: bool = False) -> tuple[float, float]:
    """(energy, latency) below every plan of a group: each output computed once, its input fetched and
    its output written once (a group the search did not try still has this bound), less what producers
    leaving second operands in the store (``kept``) may save, reading the group's input there included."""
    top, st = arch.levels[0], arch.levels[store_index(arch)]
    macs = sum(s.macs for s in stages)
    fetched = stages[0].in_rows * stages[0].in_cols * stages[0].in_depth * stages[0].in_bits
    written = stages[-1].out_rows * stages[-1].out_cols * stages[-1].out_depth * stages[-1].out_bits
    energy = (macs * arch.compute.mac_energy_pj + transfer_energy(top, fetched, 0) + transfer_energy(st, 0, fetched)
              + transfer_energy(top, 0, written) + transfer_energy(st, written, 0)
              - (kept.energy_saved + kept.input_energy_saved if kept else 0.0))
    bw_r, bw_w = top.read_bw_bits, top.write_bw_bits
    if shared_port:
        bw = shared_port_bandwidth(top)
        return energy, max(macs / arch.peak_macs_per_cycle, (fetched + written) / bw if bw else 0.0)
    return energy, max(macs / arch.peak_macs_per_cycle, fetched / bw_r if bw_r else 0.0,
                       written / bw_w if bw_w else 0.0)


def chain_front(chain: FusableChain, singles: dict[str, Single], arch: Accelerator, inner: InnerMappings,
                cfg: FusionConfig = DEFAULT_FUSION, stats: SearchLog | None = None,
                deadline: float | None = None, bound_front: list[Point] | None = None,
                producers: dict[str, Producer] | None = None) -> list[Point]:
    """The energy-latency front of the chain's plans (cut points, tiles, modes, the join).

    Past ``deadline`` (``time.perf_counter()`` seconds) no further group is tried: every operator
    alone stays a plan, so the front is still complete over the plans tried, and ``stats`` records
    how many groups were skipped. ``bound_front``, when given, receives the front of the same dynamic
    program over the plans costed and the lower bounds of those not resolved (exact tile search):
    nothing in the space searched is below it."""
    stats = stats if stats is not None else SearchLog()
    t0 = time.perf_counter()
    n = len(chain.nodes)
    alone_after = joins_alone(chain, arch)
    alone_before = norms_alone(chain, arch, cfg.shared_offchip_port)
    keep = cfg.front_limit
    fronts: list[list[Point]] = [[Point(0.0, 0.0, 0, ())]]
    bounds: list[list[Point]] = [[Point(0.0, 0.0, 0, ())]]
    for k in range(1, n + 1):
        pts: list[Point] = []
        bpts: list[Point] = []
        for i in range(max(0, k - cfg.max_group), k):
            options: list[tuple[float, float, int, tuple[Choice, ...]]]
            lows: list[tuple[float, float]] = []
            if k - i == 1:
                s = singles[chain.nodes[i]]
                options = [(s.energy, s.latency, s.offchip_bits, (s,))]
            elif out_of_time(deadline, stats):
                stats.groups_skipped += 1
                options = []
                stages_ik, macs_ik = chain.group(i, k - 1)
                produced = group_producers(chain, i, k - 1, producers)
                lows = [group_floor(stages_ik, arch, producers_on_chip(arch, produced, macs_ik) if produced else None,
                                    cfg.shared_offchip_port)]
            else:
                stats.groups_tried += 1
                unresolved: list[tuple[float, float]] = []
                options = [(g.energy, g.latency, g.offchip_bits, (g,))
                           for g in group_candidates(chain, i, k - 1, arch, inner, cfg, stats, deadline, unresolved,
                                                     producers)]
                lows = unresolved
            alone = alone_after.get(k - 1)
            if alone is not None:
                # A plan whose last piece leaves the join after it out runs it alone after it.
                options = [(e + alone.energy, lat + alone.latency, off + alone.offchip_bits, c + (alone,))
                           if not (isinstance(c[-1], GroupCost) and c[-1].join is not None) else (e, lat, off, c)
                           for e, lat, off, c in options]
                lows = [(e + alone.energy, lat + alone.latency) for e, lat in lows]
            for norm in alone_before.get(i, ()):
                # A piece starting after a normalization runs it alone before it.
                options = [(e + norm.energy, lat + norm.latency, off + norm.offchip_bits, (norm,) + c)
                           for e, lat, off, c in options]
                lows = [(e + norm.energy, lat + norm.latency) for e, lat in lows]
            for p in fronts[i]:
                for e, lat, off, c in options:
                    pts.append(Point(p.energy + e, p.latency + lat, p.offchip_bits + off, p.choices + c))
            for p in bounds[i]:
                for e, lat in [(o[0], o[1]) for o in options] + lows:
                    bpts.append(Point(p.energy + e, p.latency + lat, 0, ()))
        for acc, new in ((fronts, pareto(pts, None)), (bounds, pareto(bpts, None))):
            if keep is not None and len(new) > keep:
                stats.fronts_thinned = True       # the plans dropped may hold the best one
            acc.append(pareto(new, keep))
    stats.seconds += time.perf_counter() - t0
    if bound_front is not None:
        bound_front.extend(bounds[n])
    return fronts[n]


def combine(base: Point, fronts: list[list[Point]], objective: str, keep: int | None = 64,
            stats: SearchLog | None = None) -> Point:
    """The best total of ``base`` plus one point of every front (Pareto fold, then the objective);
    ``stats.fronts_thinned`` says when a fold had more than ``keep`` points."""
    acc = [base]
    for f in fronts:
        acc = pareto([Point(a.energy + p.energy, a.latency + p.latency, a.offchip_bits + p.offchip_bits,
                            a.choices + p.choices) for a in acc for p in f], None)
        if keep is not None and len(acc) > keep:
            if stats is not None:
                stats.fronts_thinned = True
            acc = pareto(acc, keep)
    return min(acc, key=lambda p: p.objective(objective))
