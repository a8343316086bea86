"""The heuristic's probes of spatial unrollings, costed in batches.

A probe judges one unrolling by the best of its maximal tilings and a few random ones (``tilings.py``) under
the fullest bypass choice that admits one, ranked under every per-level order of ``tilings.dim_orders``
(``heuristic.py``, step 1). The unrollings come in order of their lower bound; one whose bound is not below
the best probe so far is skipped (it cannot beat it), and the probes stop at a count or a share of the time
limit.

A call of the vectorized model costs mostly per call, not per row (about 5 ms for one row or a hundred on
ResNet-18 layer3.0.conv2 on eyeriss_like, and a probe has a hundred-odd rows under six orders), so probing one
unrolling at a time spent most of the README job's CPU in the calls' overhead. Here the seeds of up to
``BATCH`` unrollings are drawn first and costed together (fewer at first and near the probes' deadline), one call
per order for all of them
(``tiling.batch_form`` puts several unrollings in one loop structure, the others' spatial loops at bound 1,
which gives exactly the values a call of its own gives: every value is bit-identical, checked in
``tests/test_search_probes.py``).

The result is the sequential one, to the bit: the same unrollings probed, the same values, the same random
draws. A batch is drawn with the skip test of the best probe before it; once costed, it is walked in order,
and the first unrolling that the sequence would have skipped (its bound not below a probe of an earlier one in
the batch) ends the batch there: the generator's state is restored to what it was before that unrolling drew
its seeds, so what follows draws as the sequence would have, and the batches after it are smaller (halved at
every such stop, doubled back after a batch without one).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.search.heuristic_config import HeuristicConfig
from accelmap.search.spatial import SpatialCandidate
from accelmap.search.tiling import Keep, Spatial, describe_spatial, padded_operator
from accelmap.search.tilings import cost_rows_many, random_tilings, seed_tilings
from accelmap.workload.operator import Operator

log = logging.getLogger("accelmap.search.heuristic")

# Unrollings whose seeds are costed together at most (the batch halves after a batch cut short; no result
# depends on it, only the work: a batch cut short drew and costed the seeds of the unrollings after the cut).
BATCH = 16
# The first batch's size; it doubles after every batch not cut short, up to BATCH, and never exceeds what the
# CPU per probe of the batches so far leaves until the probes' deadline. A probe on ZigZag's ascend_like (8 levels,
# four packings, hundreds of seeds under six orders) costs about half a CPU second: a first batch of 16 there ran
# past a 5 s time limit before any full search (ResNet-18 conv1 ended 800x worse than with the probes one by one).
FIRST_BATCH = 2


@dataclass
class Probes:
    """What the probes found: (best value, unrolling) per probed unrolling, in the order probed."""
    found: list[tuple[float, Spatial]] = field(default_factory=list)
    cut_by_bound: int = 0
    costed: int = 0          # rows costed, those of batches cut short included


@dataclass
class _Entry:
    index: int                                    # in the ranked list
    cand: SpatialCandidate
    state: Any                                    # the generator's state before its seeds were drawn
    seed: tuple[Operator, Keep, np.ndarray] | None = None   # (padded operator, bypass choice, tilings); None: none fits
    value: float = math.nan


def _draw(op: Operator, arch: Accelerator, cand: SpatialCandidate, by_fullness: list[Keep],
          rng: np.random.Generator, config: HeuristicConfig) -> tuple[Operator, Keep, np.ndarray] | None:
    """A probe's tilings: under the fullest bypass choice that admits any, its maximal tilings (every packing)
    and a few random ones. The random ones matter: where a maximal tile packs a buffer badly (every maximal
    tiling of ZigZag's own unrolling of ResNet-18 layer4.0.conv2 on its tpu_like is 750x off), the unrolling
    is still judged by what it can do."""
    spatial = cand.assignment
    op_pad, rem = padded_operator(op, spatial)
    for keep in by_fullness:
        F = np.concatenate(seed_tilings(op_pad, arch, keep, spatial, rem, rng,
                                        rows_per_level=config.probe_rows_per_level))
        R = random_tilings(op_pad, arch, keep, spatial, rem, rng, config.probe_random_tilings)
        if len(F) or len(R):
            # A random tiling may repeat a maximal one or another random one (15% of the rows on ResNet-18
            # layer4.0.downsample on eyeriss_like): each distinct row once, which leaves the least value as it is.
            rows = np.concatenate([F, R])
            return op_pad, keep, np.unique(rows.reshape(len(rows), -1), axis=0).reshape(-1, *rows.shape[1:])
    return None


def _cost(arch: Accelerator, entries: list[_Entry], objective: str, orders: list[tuple[str, ...]]) -> int:
    """Each entry's value: the least objective over its tilings and the orders; entries of one padded operator
    and bypass choice are costed in one call per order. Returns the rows costed."""
    groups: dict[tuple, list[_Entry]] = {}
    for e in entries:
        if e.seed is not None:
            groups.setdefault((e.seed[0].dims, e.seed[1]), []).append(e)
    costed = 0
    for members in groups.values():
        op_pad, keep = members[0].seed[0], members[0].seed[1]      # type: ignore[index]
        spatials = [e.cand.assignment for e in members]
        rows = [e.seed[2] for e in members]                          # type: ignore[index]
        best = np.full(len(members), np.nan)
        ends = np.cumsum([len(r) for r in rows])
        for order in orders:
            vals = cost_rows_many(op_pad, arch, keep, spatials, rows, objective, order)
            costed += len(vals)
            # fmin ignores NaN, as the ranking of one probe's rows did (a NaN sorts last there).
            best = np.fmin(best, np.fmin.reduceat(vals, ends - np.array([len(r) for r in rows])))
        for e, v in zip(members, best, strict=True):
            e.value = float(v)
    return costed


def probe_unrollings(op: Operator, arch: Accelerator, ranked: list[SpatialCandidate], by_fullness: list[Keep],
                     objective: str, orders: list[tuple[str, ...]], rng: np.random.Generator,
                     config: HeuristicConfig, clock: Callable[[], float] = time.perf_counter,
                     probe_deadline: float = math.inf, deadline: float = math.inf) -> Probes:
    """Probe ``ranked`` (in bound order) as the module doc says."""
    out = Probes()
    cut: set[int] = set()
    best = math.inf
    batch = min(FIRST_BATCH, BATCH)
    per_probe = 0.0          # clock seconds per probe (drawn and costed) so far
    n_done = 0
    i = 0
    stop: str | None = None
    while i < len(ranked) and stop is None:
        entries: list[_Entry] = []
        j = i
        size = batch
        if n_done and math.isfinite(probe_deadline):
            size = max(1, min(batch, int((probe_deadline - clock()) / max(per_probe, 1e-9))))
        started = clock()
        while j < len(ranked) and len(entries) < size:
            cand = ranked[j]
            if cand.bound(objective) >= best:
                if j not in cut and log.isEnabledFor(logging.DEBUG):
                    log.debug("%s: skip %s: its bound %.4g cannot beat the best probe %.4g", op.name,
                              describe_spatial(cand.assignment, arch), cand.bound(objective), best)
                cut.add(j)
                j += 1
                continue
            n = len(out.found) + sum(e.seed is not None for e in entries)
            if n >= config.max_probes or (n and clock() > probe_deadline):
                stop = (f"the budget of {config.max_probes}" if n >= config.max_probes
                        else f"{config.probe_share:.0%} of the time limit")
                break
            state = rng.bit_generator.state
            entries.append(_Entry(j, cand, state, _draw(op, arch, cand, by_fullness, rng, config)))
            j += 1
        out.costed += _cost(arch, entries, objective, orders)
        if entries:
            per_probe = (per_probe * n_done + (clock() - started)) / (n_done + len(entries))
            n_done += len(entries)
        # The sequence would have skipped an unrolling whose bound is not below an earlier probe of this batch:
        # the batch ends there, and the generator goes back to where the sequence would have it.
        for e in entries:
            if e.cand.bound(objective) >= best:
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("%s: skip %s: its bound %.4g cannot beat the best probe %.4g", op.name,
                              describe_spatial(e.cand.assignment, arch), e.cand.bound(objective), best)
                cut = {c for c in cut if c < e.index} | {e.index}
                rng.bit_generator.state = e.state
                j = e.index + 1
                batch = max(1, batch // 2)
                stop = None
                break
            if e.seed is None:
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("%s: %s: no tiling fits under any bypass choice", op.name,
                              describe_spatial(e.cand.assignment, arch))
                continue
            out.found.append((e.value, e.cand.assignment))
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s: probe %s: bound %.4g, best of %d tilings %.4g", op.name,
                          describe_spatial(e.cand.assignment, arch), e.cand.bound(objective), len(e.seed[2]), e.value)
            best = min(best, e.value)
        else:
            batch = min(BATCH, batch * 2)
        i = j
        if stop is None and clock() > deadline:
            log.info("%s: time limit reached while probing", op.name)
            break
    if stop is not None:
        # As the sequence did: the unrollings up to the next one not skipped by the final best count as skipped.
        while i < len(ranked) and ranked[i].bound(objective) >= best:
            cut.add(i)
            i += 1
        log.info("%s: probes stop at %s", op.name, stop)
    out.cut_by_bound = len(cut)
    return out


def probe_values(op: Operator, arch: Accelerator, assignments: list[dict], by_fullness: list[Keep], objective: str,
                 orders: list[tuple[str, ...]], config: HeuristicConfig, seed: int = 0) -> list[float]:
    """The probe of each unrolling in ``assignments`` ({(level, axis): {dim: bound}}), as ``probe_unrollings``
    judges one (the least ``objective`` over its tilings and ``orders``; inf where no tiling fits), without its
    skips. Each unrolling draws from a generator of its own seeded by ``seed``, so a value does not depend on the
    others probed with it (the exact search's subtree order, ``subtree_order.py``, probes windows of unrollings);
    those of one padded operator and bypass choice are still costed together."""
    entries: list[_Entry] = []
    for assignment in assignments:
        cand = SpatialCandidate(assignment, 0, 0.0, 0.0)       # (a probe reads only the assignment)
        rng = np.random.default_rng(seed)
        entries.append(_Entry(len(entries), cand, None, _draw(op, arch, cand, by_fullness, rng, config)))
    _cost(arch, entries, objective, orders)
    return [math.inf if e.seed is None or math.isnan(e.value) else e.value for e in entries]
