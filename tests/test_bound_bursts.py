"""Rule B29 (docs/mapper.md, ``search/burst_bound.py``): a double buffer hides a load only behind one window of
compute, so the transitions of the fixed loops that bring whole tiles cost their loads. The node's latency bound with
the rule must stay below the latency of every mapping below the node (random mappings of double-buffered presets and
of small random double-buffered machines, random completions of the open levels and random orders of the free-order
level); an unsafe version (loads counted twice) must exceed some latency; the exact search must find the exhaustive
optimum where the rule cuts nodes; and on ascend_like the rule must raise the bound of a best mapping."""

import random

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.validate import validate
from accelmap.search import bounds
from accelmap.search.bounds import BoundContext
from accelmap.search.spatial import unrolling_of
from accelmap.workload import gemm
from strategies import fixed_at_and_above, random_perfect_mappings, three_level_machine
from test_bound_network_and_runs import _completions


def small_double_buffered(rng: random.Random):
    """A random three-level accelerator whose inner levels are double-buffered and small, with slow ports (so that
    whole-tile loads exceed a window of compute), a fan-out under the middle level and DMA setup cycles."""
    def bw():
        return f"{rng.choice([8, 16, 32])} bit/cycle"

    mid = {"name": "L2", "holds": rng.sample(["I", "W", "O"], rng.randint(1, 3)), "width": "8 bit",
           "capacity": f"{rng.choice([16, 32, 64])} B", "read_energy": f"{rng.randint(2, 20)} pJ",
           "write_energy": f"{rng.randint(2, 20)} pJ", "read_bandwidth": bw(), "write_bandwidth": bw(),
           "double_buffered": True, "transfer_setup_cycles": rng.choice([0, 0, 1, 3]),
           "fanout": {"axes": [{"name": "X", "size": rng.choice([2, 4]), "multicast": rng.random() < 0.7,
                                "reduce": rng.random() < 0.7}], "transfer_energy": "1 pJ"}}
    inner = {"name": "L1", "holds": rng.sample(["I", "W", "O"], rng.randint(1, 3)), "width": "8 bit",
             "capacity": f"{rng.choice([8, 16, 32])} B", "read_energy": "1 pJ", "write_energy": "1 pJ",
             "double_buffered": True, "transfer_setup_cycles": rng.choice([0, 1])}
    if rng.random() < 0.5:
        inner["write_bandwidth"] = bw()
    return three_level_machine(mid, inner, bw)


def _reordered(rng, op, arch, m, level):
    """``m`` with the temporal loops of ``level`` in a random order (the free-order level of rule B3), if valid."""
    own = [l for l in m.loops if l.level == level and not l.spatial]
    rng.shuffle(own)
    it = iter(own)
    cand = Mapping(tuple(next(it) if l.level == level and not l.spatial else l for l in m.loops), m.keep)
    try:
        validate(op, arch, cand)
    except MappingError:
        return None
    return cand


def _mappings(seed: int, draws: int):
    yield from random_perfect_mappings(seed, draws, [], small_double_buffered)
    yield from random_perfect_mappings(seed + 1, draws // 2, ["ascend_like", "tpu_like", "vta_like"])


def test_the_rule_never_exceeds_the_latency_of_any_completion():
    """At every level, with the level's order fixed and free (rule B3), the node's latency bound is at most the
    latency of the mapping, of random completions of its open levels and of a random order of the free level."""
    rng = random.Random(3)
    checked = fired = 0
    for _, arch, op, m in _mappings(17, 9):
        ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
        for level in range(len(arch.levels) + 1):
            fixed, rem = fixed_at_and_above(op, m, level)
            for free in (frozenset(), frozenset({level}) if level < len(arch.levels) else frozenset()):
                lat = ctx.lower_bound(fixed, level, rem, free_orders=free)[1]
                cands = [m, *_completions(rng, op, arch, m, level, 1)]
                if free:
                    cands += [c for c in (_reordered(rng, op, arch, x, level) for x in list(cands)) if c is not None]
                for cand in cands:
                    assert lat <= evaluate(op, arch, cand, check=False).latency * (1 + 1e-12), \
                        (arch.name, level, free, m, cand)
                    checked += 1
                saved, ctx.burst_levels = ctx.burst_levels, ()
                fired += lat > ctx.lower_bound(fixed, level, rem, free_orders=free)[1] * (1 + 1e-9)
                ctx.burst_levels = saved
    assert checked > 100 and fired >= 3, (checked, fired)


def test_counting_the_loads_twice_exceeds_some_latency(monkeypatch):
    """The check above can fail: with every load counted twice the bound exceeds the latency of some mapping."""
    from accelmap.search import burst_bound

    original = burst_bound.burst_cycles

    def doubled(found, outside, pace):
        return original([(burst_bound.BurstClasses(b.window, b.inner, tuple((k, 2 * t) for k, t in b.classes)), calm)
                         for b, calm in found], outside, pace)

    monkeypatch.setattr(bounds, "burst_cycles", doubled)
    caught = 0
    for _, arch, op, m in _mappings(17, 24):
        ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
        latency = evaluate(op, arch, m, check=False).latency
        caught += any(ctx.lower_bound(*_node(op, m, level))[1] > latency * 1.000001
                      for level in range(len(arch.levels) + 1))
    assert caught >= 1


def _node(op, m, level):
    fixed, rem = fixed_at_and_above(op, m, level)
    return fixed, level, rem


def _sweep_case(index: int):
    """The ``index``-th draw of the sweep that found the cases below (``random.Random(1)``: a machine, a GEMM's sizes
    and an objective per draw)."""
    rng = random.Random(1)
    for _ in range(index + 1):
        arch = small_double_buffered(rng)
        dims = rng.choice([(2, 2, 3), (2, 3, 4), (4, 2, 2), (3, 2, 4), (2, 4, 4)])
        objective = rng.choice(["latency", "edp"])
    return arch, adopt_precision(gemm("g", m=dims[0], n=dims[1], k=dims[2]), arch), objective


def test_exact_search_finds_the_exhaustive_optimum_where_the_rule_cuts(monkeypatch):
    """Where rule B29 cuts nodes of the exact search (two draws of a sweep over 25 small double-buffered machines, the
    only ones of them where it did), the search finds the same optimum with and without it, proven; the exhaustive
    search gave that optimum too (19 cycles and an EDP of 21,788; about 7 s of CPU each, so not run here)."""
    from accelmap.search.exact import search_exact

    for index, optimum in ((19, 19.0), (23, 21788.0)):
        arch, op, objective = _sweep_case(index)
        got, st = search_exact(op, arch, objective, heuristic=False)
        with monkeypatch.context() as patch:
            patch.setattr(bounds, "burst_levels", lambda ctx: ())
            ref, st_off = search_exact(op, arch, objective, heuristic=False)
        assert st.extra["proven"] and st_off.extra["proven"]
        assert got[0].value == ref[0].value == optimum
        assert st.nodes < st_off.nodes


def _layer4_conv1_node():
    """A node of the exact search on ResNet-18 layer4.0.conv1 on ascend_like: every loop fixed but DRAM's order."""
    from accelmap.workload.models import load_model

    arch = get_accelerator("ascend_like")
    op = adopt_precision(next(x for x in load_model("resnet18").layers if x.name == "layer4.0.conv1").operator, arch)
    L = Loop
    fixed = (L("K", 2, 0), L("C", 16, 0), L("R", 3, 0), L("K", 8, 3), L("S", 3, 4), L("Q", 7, 4),
             L("K", 16, 5, "X"), L("K", 2, 5, "Y"), L("P", 7, 5, "Y"), L("C", 16, 5, "Z"))
    keep = (frozenset("IWO"), frozenset(), frozenset(), frozenset("O"), frozenset("I"), frozenset("W"))
    return arch, op, fixed, keep


def test_the_outermost_orders_bounded_one_by_one_cut_a_node_of_layer4_conv1():
    """Rule B30: the node's bound over all of DRAM's orders (rule B3) is 78,113 cycles, below the 78,903 of the
    heuristic's best (so the node was expanded), while each of its six orders has a bound of at least 84,599 cycles,
    the model's latency of its best orders (their loads into L1 come in bursts that no window hides). The bounds by
    innermost loop are each order's least, and never above the latency of an order they cover."""
    from accelmap.search.optimal import open_order_bounds
    from accelmap.search.outer_orders import outer_order_nests

    arch, op, fixed, keep = _layer4_conv1_node()
    ctx = BoundContext(op, arch, keep, unrolling_of(arch, Mapping(fixed, keep)), "edp")
    rem = dict.fromkeys(op.sizes, 1)
    assert ctx.lower_bound(fixed, 0, rem, free_orders=frozenset({0}))[1] == 78_113.0
    nests = outer_order_nests(fixed, 0)
    assert nests is not None and len(nests) == 6
    latencies = sorted(evaluate(op, arch, Mapping(n, keep)).latency for n in nests)
    assert latencies[:2] == [84_599.0, 84_599.0]
    got = open_order_bounds(ctx, fixed, 0, rem, frozenset({0}))
    assert min(lat for _, lat in got.values()) == 84_599.0
    for nest in nests:
        inner = [l for l in nest if l.level == 0][-1]
        assert got[inner][1] <= evaluate(op, arch, Mapping(nest, keep)).latency


def test_the_outermost_orders_bounded_one_by_one_never_exceed_any_order():
    """On random mappings of the presets, each of rule B30's bounds at the outermost level is at most the cost (energy
    and latency) of every order of that level with that loop innermost."""
    from accelmap.search.optimal import open_order_bounds
    from accelmap.search.outer_orders import outer_order_nests

    checked = 0
    for _, arch, op, m in random_perfect_mappings(8, 30, ["ascend_like", "tpu_like", "vta_like", "eyeriss_like"]):
        nests = outer_order_nests(m.loops, 0)
        if nests is None:
            continue
        ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
        got = open_order_bounds(ctx, m.loops, 0, dict.fromkeys(op.sizes, 1), frozenset({0}))
        for nest in nests:
            inner = [l for l in nest if l.level == 0 and not l.spatial and l.bound > 1][-1]
            res = evaluate(op, arch, Mapping(nest, m.keep), check=False)
            assert got[inner][0] <= res.energy_total * (1 + 1e-12) and got[inner][1] <= res.latency * (1 + 1e-12)
            checked += 1
    assert checked >= 20
