"""Rule B27 (docs/mapper.md, ``search/open_level_refills.py``): an open single-buffered level's least refill over every
tile shape that fits it stalls compute. The rule's stall must stay below the model's single-buffer stalls of every
mapping below the node, and the node bound below the latency, on presets and random accelerators with small
single-buffered levels, port bandwidths and DMA setup; the batched bound must equal the scalar one; the exact search
must find the exhaustive optimum where the rule cuts; and the rule must raise eyeriss_like's root bound."""

import functools
import random

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.search import bounds, optimal
from accelmap.search.bounds import BoundContext
from accelmap.search.open_level_refills import open_levels_stall
from accelmap.search.spatial import unrolling_of
from accelmap.workload import gemm
from strategies import fixed_at_and_above, random_perfect_mappings, three_level_machine
from test_bound_network_and_runs import _completions


def small_single_buffered(rng: random.Random):
    """A random three-level accelerator whose inner levels are single-buffered and small (so that tiles must be
    refetched), with a fan-out under the middle level, port bandwidths and DMA setup cycles."""
    def bw():
        return f"{rng.choice([8, 16, 32, 64])} bit/cycle"

    mid = {"name": "L2", "holds": rng.sample(["I", "W", "O"], rng.randint(1, 3)), "width": "8 bit",
           "capacity": f"{rng.choice([8, 16, 32, 64])} B", "read_energy": f"{rng.randint(2, 20)} pJ",
           "write_energy": f"{rng.randint(2, 20)} pJ", "read_bandwidth": bw(),
           "transfer_setup_cycles": rng.choice([0, 0, 1, 5]),
           "fanout": {"axes": [{"name": "X", "size": rng.choice([2, 3, 4]), "multicast": rng.random() < 0.7,
                                "reduce": rng.random() < 0.7}], "transfer_energy": "1 pJ"}}
    if rng.random() < 0.5:
        mid["write_bandwidth"] = bw()
    inner = {"name": "L1", "holds": rng.sample(["I", "W", "O"], rng.randint(1, 3)), "width": "8 bit",
             "read_energy": "1 pJ", "write_energy": "1 pJ", "transfer_setup_cycles": rng.choice([0, 1])}
    if rng.random() < 0.5:
        inner["partitions"] = {c: f"{rng.choice([1, 2, 4, 8])} B" for c in inner["holds"]}
    else:
        inner["capacity"] = f"{rng.choice([4, 8, 16])} B"
    if rng.random() < 0.5:
        inner["write_bandwidth"] = bw()
    return three_level_machine(mid, inner, bw)


def _stall(res) -> float:
    return dict(res.latency_parts).get("single-buffer stalls", 0.0)


def test_the_rule_never_exceeds_the_stall_of_any_completion():
    """At every level, with the unrolling known and not, B27's stall is at most the single-buffer stalls of the
    mapping and of random completions of its open levels, and the node's latency bound at most their latency."""
    checked = fired = 0
    mappings = [*random_perfect_mappings(3, 16, [], small_single_buffered),
                *random_perfect_mappings(29, 3, ["eyeriss_like", "simba_like", "edge_tpu_like"])]
    for rng, arch, op, m in mappings:
        for spatial in (unrolling_of(arch, m), None):
            ctx = BoundContext(op, arch, m.keep, spatial)
            for level in range(len(arch.levels) + 1):
                fixed, rem = fixed_at_and_above(op, m, level)
                floor = open_levels_stall(ctx, level)
                energy, lat = ctx.lower_bound(fixed, level, rem)
                for cand in [m, *_completions(rng, op, arch, m, level, 1)]:
                    res = evaluate(op, arch, cand, check=False)
                    assert floor <= _stall(res) * (1 + 1e-12), (arch.name, level, spatial, cand)
                    assert lat <= res.latency * (1 + 1e-12), (arch.name, level, spatial, cand)
                    # (rule B28 narrows B8's tile shapes as well: its energy too)
                    assert energy <= res.energy_total * (1 + 1e-12), (arch.name, level, spatial, cand)
                    checked += 1
                fired += floor > 0
    assert checked > 150 and fired > 40


def test_exact_search_finds_the_same_optimum_where_the_rule_cuts(monkeypatch):
    """Where the rules cut nodes of the exact search (a 2x2x3 GEMM on a small single-buffered accelerator, found by a
    sweep), the search finds the optimum it finds with them off, proven (the search without them is checked against
    the exhaustive one in ``tests/test_search.py``; the exhaustive search itself takes about 5 s of CPU here, and gave
    the same optimum when checked once)."""
    from accelmap.search.exact import search_exact

    rng = random.Random(11)
    for _ in range(15):
        arch = small_single_buffered(rng)
        rng.choice([0, 1, 2]), rng.choice([0, 1])      # (the sweep's draws of an operator and an objective)
    op = adopt_precision(gemm("g", m=2, n=2, k=3), arch)
    # Rules B70 and B71 (later) cut every node B27 cuts here (11 nodes either way): both searches go without them.
    monkeypatch.setattr(bounds, "first_queue_terms", lambda *a, **k: [])
    monkeypatch.setattr(bounds, "last_drain_terms", functools.partial(bounds.last_drain_terms, spread=False))
    got, st = search_exact(op, arch, "edp", heuristic=False)
    with monkeypatch.context() as patch:
        patch.setattr(bounds, "open_levels_stall", lambda ctx, level: 0.0)
        # (rule B36 pairs B27's per-shape stalls with energy at the root: off too, or it carries B27 there)
        patch.setattr(optimal, "paired_root_bound", lambda ctx: None)
        ref, st_off = search_exact(op, arch, "edp", heuristic=False)
    assert st.extra["proven"] and st_off.extra["proven"]
    assert got[0].value == ref[0].value == 29588.0
    assert st.nodes < st_off.nodes


def test_the_rules_raise_the_root_bound_on_eyeriss_like():
    """ResNet-18 layer1.0.conv1 on eyeriss_like with P on the array's columns and P, R on its rows, every level
    keeping every operand it may, nothing else fixed: every tile that fits the register files (12 input, 224 weight,
    24 partial-sum words) refetches some operand over the global buffer's or DRAM's port in every order of the loops
    above them, so the root's latency bound rises by 80% (the MAC schedule is 688,128 cycles)."""
    from accelmap.workload.models import load_model

    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(next(x for x in load_model("resnet18").layers if x.name == "layer1.0.conv1").operator, arch)
    spatial = {"X": {"P": 14}, "Y": {"P": 4, "R": 3}}
    keep = (frozenset("IWO"), frozenset("IO"), frozenset("IWO"))
    root = ((), len(arch.levels), dict(op.sizes))
    with_rules = BoundContext(op, arch, keep, spatial).lower_bound(*root)
    original = bounds.open_levels_stall
    try:
        bounds.open_levels_stall = lambda ctx, level: 0.0
        without = BoundContext(op, arch, keep, spatial).lower_bound(*root)
    finally:
        bounds.open_levels_stall = original
    assert (round(without[1]), round(with_rules[1])) == (765_874, 1_379_442)
    assert with_rules[0] == without[0]
