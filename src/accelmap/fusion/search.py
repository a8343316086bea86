"""Where to cut a chain into fused groups, and each group's tile and halo policy.

Every group of consecutive operators (up to ``max_group``) is tried with every halo mode, with the
operators' weights refetched by every tile or (where the store holds weights) kept in it, the
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

import logging
import time
from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator
from accelmap.fusion.chain import FusableChain
from accelmap.fusion.geometry import MODES, fused_counts
from accelmap.fusion.group_cost import (
    GroupCost,
    InnerMappings,
    group_cost,
    reserved,
    resident_weight_bits,
    store_index,
    tile_candidates,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FusionConfig:
    max_group: int = 8          # operators in one fused group at most
    row_tiles: int = 8          # row tile sizes tried: the whole output, then halves
    col_tiles: int = 3          # column tile sizes tried (convolutions): the whole width, then halves
    per_mode: int = 2           # largest fitting row tiles costed per (mode, column tile)


DEFAULT_FUSION = FusionConfig()


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


def pareto(points: list[Point], keep: int = 64) -> list[Point]:
    """The non-dominated points (energy, latency), lowest energy first; at most ``keep``, spread evenly."""
    pts = sorted(points, key=lambda p: (p.energy, p.latency, p.offchip_bits))
    front: list[Point] = []
    for p in pts:
        if not front or p.latency < front[-1].latency:
            front.append(p)
    if len(front) > keep:
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


def out_of_time(deadline: float | None, stats: SearchLog) -> bool:
    """Whether the search's deadline (``time.perf_counter()`` seconds) has passed; remembered in ``stats``."""
    if deadline is not None and time.perf_counter() >= deadline:
        stats.timed_out = True
    return stats.timed_out and deadline is not None


def group_candidates(chain: FusableChain, first: int, last: int, arch: Accelerator, inner: InnerMappings,
                     cfg: FusionConfig, stats: SearchLog, deadline: float | None = None) -> list[GroupCost]:
    """The group's costed plans; past ``deadline`` no further plan is costed (``stats`` says so)."""
    stages, macs = chain.group(first, last)
    out_last = stages[-1]
    found: list[GroupCost] = []
    cols = tile_candidates(out_last.out_cols, cfg.col_tiles) if out_last.out_cols > 1 else [1]
    # Without a window wider than one row or column (matrix products along tokens) no halo exists,
    # and every mode is the same plan.
    halo = any(s.rows.span > 1 or s.cols.span > 1 for s in stages)
    # Weights kept in the store for all tiles, where it holds them: fewer refetches, less room for tiles.
    residency = (False, True) if "W" in arch.levels[store_index(arch)].holds else (False,)
    for resident in residency:
        extra = resident_weight_bits(macs) if resident else 0
        for mode in MODES if halo else ("fully-cached",):
            policies = (mode,) * len(stages)
            for tc in cols:
                fitting = [tr for tr in tile_candidates(out_last.out_rows, cfg.row_tiles)
                           if reserved(arch, fused_counts(stages, tr, tc, policies).buffer_total_bits + extra)
                           is not None]
                for tr in fitting[:cfg.per_mode]:
                    if out_of_time(deadline, stats):
                        stats.groups_skipped += 1      # cut short: some of its plans were not costed
                        return found
                    got = group_cost(stages, macs, arch, tr, tc, policies, inner, resident)
                    if isinstance(got, str):
                        stats.candidates_rejected += 1
                        log.debug("%s..%s %dx%d %s: %s", chain.nodes[first], chain.nodes[last], tr, tc, mode, got)
                    else:
                        stats.candidates_costed += 1
                        found.append(got)
    return found


def chain_front(chain: FusableChain, singles: dict[str, Single], arch: Accelerator, inner: InnerMappings,
                cfg: FusionConfig = DEFAULT_FUSION, stats: SearchLog | None = None,
                deadline: float | None = None) -> list[Point]:
    """The energy-latency front of the chain's plans (cut points, tiles, modes).

    Past ``deadline`` (``time.perf_counter()`` seconds) no further group is tried: every operator
    alone stays a plan, so the front is still complete over the plans tried, and ``stats`` records
    how many groups were skipped."""
    stats = stats if stats is not None else SearchLog()
    t0 = time.perf_counter()
    n = len(chain.nodes)
    fronts: list[list[Point]] = [[Point(0.0, 0.0, 0, ())]]
    for k in range(1, n + 1):
        pts: list[Point] = []
        for i in range(max(0, k - cfg.max_group), k):
            if k - i == 1:
                s = singles[chain.nodes[i]]
                options: list[tuple[float, float, int, Choice]] = [(s.energy, s.latency, s.offchip_bits, s)]
            elif out_of_time(deadline, stats):
                stats.groups_skipped += 1
                options = []
            else:
                stats.groups_tried += 1
                options = [(g.energy, g.latency, g.offchip_bits, g)
                           for g in group_candidates(chain, i, k - 1, arch, inner, cfg, stats, deadline)]
            for p in fronts[i]:
                for e, lat, off, c in options:
                    pts.append(Point(p.energy + e, p.latency + lat, p.offchip_bits + off, p.choices + (c,)))
        fronts.append(pareto(pts))
    stats.seconds += time.perf_counter() - t0
    return fronts[n]


def combine(base: Point, fronts: list[list[Point]], objective: str) -> Point:
    """The best total of ``base`` plus one point of every front (Pareto fold, then the objective)."""
    acc = [base]
    for f in fronts:
        acc = pareto([Point(a.energy + p.energy, a.latency + p.latency, a.offchip_bits + p.offchip_bits,
                            a.choices + p.choices) for a in acc for p in f])
    return min(acc, key=lambda p: p.objective(objective))
