"""Rule B24 (docs/mapper.md, ``search/pinned_stall.py``): a single-buffered level that holds one element of an operand
stalls compute at every step that moves it, and every step of a temporal loop over one of its plain dims does. The
unrolling bounds (S1 with S3, S6, S7) take the MAC schedule plus that stall. The bound must stay below the latency of
every mapping (perfect, imperfect, padded; presets and random accelerators with one-element levels), the exact search
must still find the exhaustive optimum where the rule fires, and the rule must raise edge_tpu_like's bounds."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelmap.arch import accelerator_from_dict, get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping
from accelmap.search import pinned_cases, pinned_stall, search_exhaustive
from accelmap.search.bounds import chain_options, loose_operand, serial_fill_levels
from accelmap.search.exact import search_exact
from accelmap.search.objective import scalar
from accelmap.search.pinned_stall import dim_pinned_stall, least_utilization, level_unrolling
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import (
    certified_lower_bound,
    dims_used,
    enumerate_spatial,
    group_merges,
    spatial_lower_bound,
    unrolling_bounds,
    unrolling_of,
)
from accelmap.workload import gemm
from strategies import accelerators, random_operator

# Edge-TPU-like in small: a 2x2 array under a buffer, a one-element partial-sum register and weight register per PE.
REGISTERS = accelerator_from_dict({"name": "registers", "compute": {"mac_energy": "0.1 pJ",
                                                                     "precision": {"I": 8, "W": 8, "O": 16}},
                                   "levels": [
    {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "64 bit", "read_energy": "100 pJ",
     "read_bandwidth": "64 bit/cycle"},
    {"name": "BUF", "holds": ["I", "W", "O"], "capacity": "1 KiB", "width": "64 bit", "read_energy": "10 pJ",
     "read_bandwidth": "8 bit/cycle", "write_bandwidth": "16 bit/cycle",
     "fanout": {"axes": [{"name": "A", "size": 2, "multicast": True, "reduce": True},
                         {"name": "B", "size": 2, "multicast": True, "reduce": True}]}},
    {"name": "OREG", "holds": ["O"], "capacity": "16 bit", "width": "16 bit", "read_energy": "0.1 pJ", "bypass": False},
    {"name": "WREG", "holds": ["W"], "capacity": "8 bit", "width": "8 bit", "read_energy": "0.1 pJ", "bypass": False}]})


def _own_stall(op, arch, m) -> float:
    """The MAC schedule plus rule B24's stall for the mapping's own unrolling and level sets."""
    dims = op.dim_names
    spatial = [l for l in m.loops if l.spatial]
    groups = []
    for l in spatial:
        B = np.ones((1, len(dims)), dtype=np.int64)
        B[0, dims.index(l.dim)] = l.bound
        groups.append((l.level, arch.fanout_axis(l.level, l.axis).multicast, B))
    used = np.prod([B for _, _, B in groups], axis=0) if groups else np.ones((1, len(dims)), dtype=np.int64)
    merges = group_merges(op, len(arch.levels), groups, dims_used(op))
    chains = {X.name: [[i for i, kp in enumerate(m.keep) if X.name in kp]] for X in op.operands}
    stall = dim_pinned_stall(op, arch, chains, serial_fill_levels(arch), loose_operand, used,
                             level_unrolling(len(arch.levels), [(lvl, B) for lvl, _, B in groups], 1), merges)
    pes = math.prod(l.bound for l in spatial)
    return math.ceil(math.ceil(op.macs / pes) / arch.compute.macs_per_cycle) + float(stall((0,) * len(op.operands))[0])


def _check(op, arch, m) -> tuple[float, float]:
    """Asserts the rule's bounds below the mapping's latency; returns (B24's latency bound, the latency)."""
    res = evaluate(op, arch, m, check=False)
    own = _own_stall(op, arch, m)
    assert own <= res.latency * (1 + 1e-9), (arch.name, m, own, res.latency)
    every = chain_options(op, keep_options(op, arch, Constraints()))
    e_lb, l_lb = spatial_lower_bound(op, arch, tuple(l for l in m.loops if l.spatial), every)
    assert e_lb <= res.energy_total * (1 + 1e-9) and l_lb <= res.latency * (1 + 1e-9), (arch.name, m)
    return own, res.latency


def test_pinned_stall_never_exceeds_the_latency_on_presets():
    """Random mappings (perfect, imperfect, padded spatial rounds) of edge_tpu_like and the small register machine:
    the MAC schedule plus B24's stall is at most the latency, and it is above the MAC schedule on many."""
    rng = random.Random(3)
    checked = fired = 0
    for n in range(50):
        arch = get_accelerator("edge_tpu_like") if n % 2 else REGISTERS
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30, imperfect=n % 3 == 0)
        except MappingError:
            continue
        own, _ = _check(op, arch, m)
        spatial = math.prod(l.bound for l in m.loops if l.spatial)
        fired += own > math.ceil(op.macs / spatial) + 1e-9
        checked += 1
    assert checked >= 25 and fired >= 10, (checked, fired)


def _with_registers(arch, draw):
    """Every level below the outermost, with some probability, a one-element register of the first class it holds."""
    levels = [arch.levels[0]]
    for lv in arch.levels[1:]:
        if draw(st.booleans()):
            bits = {"I": 8, "W": 8, "O": 32}[sorted(lv.holds)[0]]
            lv = replace(lv, capacity_bits=draw(st.sampled_from([bits, 2 * bits - 1])))
        levels.append(lv)
    return replace(arch, levels=tuple(levels))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_pinned_stall_never_exceeds_the_latency_on_random_accelerators(data):
    """Random accelerators (bandwidths, double buffering, DMA setup, registers written at the clock edge, shared
    levels, pipelines) with one-element levels: B24's bound is at most the latency of a random mapping."""
    arch = _with_registers(data.draw(accelerators()), data.draw)
    op = adopt_precision(random_operator(random.Random(data.draw(st.integers(0, 2 ** 31)))), arch)
    try:
        m = random_mapping(op, arch, random.Random(data.draw(st.integers(0, 2 ** 31))), check_fit=True, tries=30,
                           imperfect=data.draw(st.booleans()))
    except MappingError:
        return
    _check(op, arch, m)


def test_least_utilization_is_the_least_over_every_split():
    """The share of busy lanes over every split of an unrolling among a class's dims, against a brute force."""
    for sizes, product in [((7,), 4), ((56, 56), 16), ((3, 5), 6), ((7, 7), 49), ((4,), 4), ((1000,), 8)]:
        want = min(math.prod(s / (u * math.ceil(s / u)) for s, u in zip(sizes, split, strict=True))
                   for split in _splits(product, len(sizes)) if all(u <= 2 * s - 1 for s, u in zip(sizes, split,
                                                                                                    strict=True)))
        assert math.isclose(least_utilization(sizes, product), want), (sizes, product)
    assert least_utilization((7,), 4) == 7 / 8 and least_utilization((4,), 4) == 1.0


def _splits(product: int, n: int):
    if n == 1:
        yield (product,)
        return
    for u in range(1, product + 1):
        if product % u == 0:
            for rest in _splits(product // u, n - 1):
                yield (u, *rest)


def test_exact_search_equals_exhaustive_where_the_rule_fires(monkeypatch):
    """On the register machine (registers that may not be bypassed) the rule raises the unrollings' latency bounds,
    so the exact search (no heuristic incumbent) ranks and cuts unrollings with it, and it still finds the exhaustive
    optimum of every objective (one exhaustive Pareto front holds each optimum), proven; the certificate stays below."""
    op = adopt_precision(gemm("g", m=2, n=2, k=2), REGISTERS)
    chains = chain_options(op, keep_options(op, REGISTERS, Constraints()))
    space = enumerate_spatial(op, REGISTERS, Constraints(), max_dims=3, pad="every")
    _, with_rule = unrolling_bounds(op, REGISTERS, space, chains)
    with monkeypatch.context() as patch:
        patch.setattr(pinned_stall.PinnedStall, "of_entries", lambda self, entries: np.zeros(len(self.temporal)))
        _, without = unrolling_bounds(op, REGISTERS, space, chains)
    assert (with_rule >= without).all() and (with_rule > without).any()
    assert_exact_equals_exhaustive(op, REGISTERS, chains)


def assert_exact_equals_exhaustive(op, arch, chains) -> None:
    """The exact search (no heuristic incumbent) proves the exhaustive optimum of every objective (one exhaustive
    Pareto front holds each optimum), and the certificate stays below it."""
    front, st_ref = search_exhaustive(op, arch, "pareto", time_limit=120)
    assert not st_ref.extra.get("timed_out") and front
    for objective in ("energy", "latency", "edp"):
        best = min(scalar(objective, f.result.energy_total, f.result.latency) for f in front)
        got, st_got = search_exact(op, arch, objective, heuristic=False, time_limit=120)
        assert st_got.extra["proven"] and math.isclose(got[0].value, best, rel_tol=1e-9), objective
        assert certified_lower_bound(op, arch, Constraints(), chains, objective)[0] <= best * (1 + 1e-9)


def own_unrolling_cases(seed: int, archs: list, count: int, imperfect_every: int):
    """Random mappings (perfect, imperfect every ``imperfect_every``-th, padded) on ``archs`` in turn, each with its
    cost, the operand chains and the space of its own unrolling alone: (n, arch, op, mapping, cost, chains, space)."""
    rng = random.Random(seed)
    for n in range(count):
        arch = archs[n % len(archs)]
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30, imperfect=n % imperfect_every == 0)
        except MappingError:
            continue
        res = evaluate(op, arch, m, check=False)
        chains = chain_options(op, keep_options(op, arch, Constraints()))
        space = enumerate_spatial(op, arch, Constraints(spatial=unrolling_of(arch, m)), max_dims=len(op.dim_names),
                                  pad="every")
        yield n, arch, op, m, res, chains, space


def test_paired_unrolling_bounds_never_exceed_the_objective():
    """Rule B25: for each scalar objective, the paired S1 bound of a mapping's own unrolling (E1's ranking and cut)
    and the certificate are at most the objective of random mappings (perfect, imperfect, padded) of edge_tpu_like,
    simba_like and the register machine; on some the pairing raises the EDP bound over the unpaired one."""
    checked = raised = 0
    every = Constraints()
    archs = [get_accelerator("edge_tpu_like"), get_accelerator("simba_like"), REGISTERS]
    for _, arch, op, m, res, chains, space in own_unrolling_cases(11, archs, 36, 4):
        assert len(space.pes) == 1
        for objective in ("energy", "latency", "edp"):
            value = scalar(objective, res.energy_total, res.latency)
            pair = unrolling_bounds(op, arch, space, chains, objective)
            assert scalar(objective, *pair)[0] <= value * (1 + 1e-9), (arch.name, objective, m)
        assert certified_lower_bound(op, arch, every, chains, "edp")[0] <= res.energy_total * res.latency * (1 + 1e-9)
        raised += scalar("edp", *unrolling_bounds(op, arch, space, chains, "edp"))[0] > \
            scalar("edp", *unrolling_bounds(op, arch, space, chains))[0] * (1 + 1e-9)
        checked += 1
    assert checked >= 15 and raised >= 3, (checked, raised)


def test_the_rules_together_raise_edge_tpu_likes_certificate(monkeypatch):
    """ResNet-18 layer2.0.downsample on edge_tpu_like: the certificate's EDP bound is 7.613e11 pJ x cycles with either
    rule alone (B24's stall is in the combinations that keep the registers, whose energy only B25 pairs with it; B25's
    pairs alone do not move it), and 1.1917e12 with both (1.565x); its energy and latency minima, which other callers
    read as bounds each valid alone, are unpaired and stay the same."""
    from accelmap.search import combination_pairs
    from accelmap.workload.models import load_model

    arch = get_accelerator("edge_tpu_like")
    layer = next(x for x in load_model("resnet18").layers if x.name == "layer2.0.downsample")
    op = adopt_precision(layer.operator, arch)
    chains = chain_options(op, keep_options(op, arch, Constraints()))
    monkeypatch.setattr("accelmap.search.bounds.MAC_STREAM_STALL", False)      # (rule B72 off: it raises these too)
    both = certified_lower_bound(op, arch, Constraints(), chains, "edp")
    assert math.isclose(both[0], 1191654342000.64, rel_tol=1e-9)
    assert np.allclose(both[1:], (24276520.96, 25088.0), rtol=1e-12)
    with monkeypatch.context() as patch:
        # (rule B33's cases off too: they build on B24's pairs)
        patch.setattr(pinned_cases.PinnedCases, "cases", pinned_stall.PinnedStall.cases)
        patch.setattr(pinned_stall.PinnedStall, "of_entries", lambda self, entries: np.zeros(len(self.temporal)))
        assert math.isclose(certified_lower_bound(op, arch, Constraints(), chains, "edp")[0], 761311697305.6,
                            rel_tol=1e-9)
    with monkeypatch.context() as patch:
        patch.setattr(combination_pairs.CombinationPairs, "done", property(lambda self: False))
        assert math.isclose(certified_lower_bound(op, arch, Constraints(), chains, "edp")[0], 761311697305.6,
                            rel_tol=1e-9)
