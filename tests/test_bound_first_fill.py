"""Rules B56, B57 and B59 (docs/mapper.md). B56: the first tiles' loads into single-buffered levels fed one to one add
to the output's stores from single-buffered levels. B57: below a padded fan-out that multicasts an input, the MACs read
it once per round. B59: the output's last drains from single-buffered levels add to any level's loads. Each stays below what the model charges, and the node bound with them below the mapping's cost,
at every level of random perfect, imperfect and padded mappings; on ResNet-18's fc on edge_tpu_like they make the
bound the mapping's cost."""

import math
import random

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.sampling import random_mapping
from accelmap.search import search_exhaustive
from accelmap.search.bounds import BoundContext
from accelmap.search.exact import search_exact
from accelmap.search.first_fill import first_fill_cycles, last_drain_cycles
from accelmap.search.imperfect_tiles import ImperfectBoundContext, full_positions
from accelmap.search.padded_busy_lanes import BusyLaneContext
from accelmap.search.padded_mac_reads import mac_read_groups
from accelmap.search.spatial import unrolling_of
from accelmap.workload import dense, parse_expression
from accelmap.workload.models import load_model
from strategies import random_operator
from test_bound_padded_rounds import buffer_over_four, padded_ruby_s_mappings
from test_bound_prologue import _fixed_tiles

ALL_PRESETS = ["eyeriss_like", "simba_like", "tpu_like", "edge_tpu_like", "ascend_like", "vta_like", "vta_8x8x8",
               "diana_like", "aie_like"]


def _node(op, m, level):
    fixed = tuple(l for l in m.loops if l.level >= level)
    rem = {d: -(-s // math.prod(l.bound for l in fixed if l.dim == d)) for d, s in op.sizes.items()}
    return fixed, rem


def bound_cases(arch, rng, draws: int, op=None):
    """Random mappings, one draw in three imperfect, of random operators (or of ``op``) on ``arch``: per mapping
    that fits, (op, mapping, its cost, whether imperfect, the bound context of its own unrolling, as the exact search
    fixes it)."""
    for draw in range(draws):
        imperfect = draw % 3 == 1
        case = op if op is not None else adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(case, arch, rng, check_fit=True, tries=30, imperfect=imperfect)
        except MappingError:
            continue
        ctx = (ImperfectBoundContext if imperfect else BoundContext)(case, arch, m.keep, unrolling_of(arch, m))
        yield case, m, evaluate(case, arch, m), imperfect, ctx


@pytest.mark.parametrize("arch_name", ALL_PRESETS)
def test_first_fill_and_the_stores_never_exceed_the_models_stall(arch_name):
    """The first fill plus rule B16's stores (what B56 adds) against the model's single-buffer stalls, and the node
    bound against the latency at every level (the mapping's own unrolling fixed, as the exact search fixes it)."""
    rng = random.Random(56)
    arch = get_accelerator(arch_name)
    checked = fired = drained = 0
    for op, m, res, imperfect, ctx in bound_cases(arch, rng, 30):
        parts = dict(res.latency_parts)
        for level in range(len(arch.levels) + 1):
            first = float(first_fill_cycles(op, ctx.first_fill_terms, _fixed_tiles(op, m, level)))
            assert first <= parts["single-buffer stalls"] * (1 + 1e-12) + 1e-9, (level, m, first, parts)
            if not imperfect:
                last = float(last_drain_cycles(op, ctx.last_drain_terms, _fixed_tiles(op, m, level)))
                assert last <= parts["single-buffer stalls"] * (1 + 1e-12) + 1e-9, (level, m, last, parts)
                drained += last > 0
            fixed, rem = _node(op, m, level)
            whole = full_positions(op, fixed) if imperfect else None
            assert ctx.lower_bound(fixed, level, rem, full_positions=whole)[1] <= res.latency * (1 + 1e-12), \
                (level, m)
            fired += first > 0
        checked += 1
    assert checked >= 20
    if arch_name == "edge_tpu_like":
        assert fired >= 12 and drained >= 12


def test_first_fill_makes_an_fc_leaf_bound_exact():
    """ResNet-18 fc's best mapping's shape on edge_tpu_like at a smaller size: the weights streamed from DRAM to the
    MACs, the inputs whole in the single-buffered activation memory, the partial sums in the output register. The
    latency is the weights' stream plus the inputs' first load plus the output register's stores; without B56 the
    bound with the activation memory fixed missed the first load (B16's stores alone), with it the bound is exact.
    (The batched bound's equality with the scalar one is ``test_search_node_bounds``'s, over random nodes.)"""
    arch = get_accelerator("edge_tpu_like")
    op = adopt_precision(dense("fc", c=64, k=48), arch)
    loops = (Loop("K", 2, 0), Loop("K", 3, 1), Loop("C", 8, 1), Loop("K", 8, 2, "D1"), Loop("C", 8, 3, "D2"))
    keep = (frozenset({"W", "I", "O"}), frozenset({"I"}), frozenset(), frozenset({"O"}), frozenset())
    m = Mapping(loops, keep)
    res = evaluate(op, arch, m)
    parts = dict(res.latency_parts)
    ctx = BoundContext(op, arch, keep, unrolling_of(arch, m))
    first = 64 * 8 / 64           # the 64 inputs at 8 bits over DRAM's 64-bit read port
    assert first_fill_cycles(op, ctx.first_fill_terms, _fixed_tiles(op, m, 1)) == first
    for level in (0, 1):
        fixed, rem = _node(op, m, level)
        assert ctx.lower_bound(fixed, level, rem)[1] == res.latency, (level, parts)
    without = BoundContext(op, arch, keep, unrolling_of(arch, m))
    without.first_fill_terms = without.first_queue_terms = []      # (rule B71 queues the same load on DRAM's port)
    assert without.lower_bound(loops, 0, dict.fromkeys(op.sizes, 1))[1] == res.latency - first


def test_padded_rounds_reads_never_exceed_the_cost():
    """Rule B57 at every level of random padded Ruby-S mappings of edge_tpu_like, tpu_like and the small buffer over
    a 4-wide multicast fan-out (the unrolling fixed in advance, as the exact search fixes it): the node bound stays
    below the mapping's energy and latency, and B57's count of the MACs' reads is at most the model's reads at the
    input's last level (rows where it exceeds B1's count: the rule fires)."""
    checked = fired = 0
    archs = [get_accelerator("edge_tpu_like"), get_accelerator("tpu_like"), buffer_over_four()]
    for arch, op, m, spatial in padded_ruby_s_mappings(240, archs, 57):
        res = evaluate(op, arch, m)
        ctx = BusyLaneContext(op, arch, m.keep, spatial)
        for level in range(len(arch.levels) + 1):
            fixed, rem = _node(op, m, level)
            got = ctx.lower_bound(fixed, level, rem, full_positions=full_positions(op, fixed))
            assert got[0] <= res.energy_total * (1 + 1e-12) and got[1] <= res.latency * (1 + 1e-12), \
                (arch.name, op, level, m)
            for X in op.operands:
                last = ctx.chains[X.name][-1]
                rounds = mac_read_groups(ctx, [l for l in fixed if l.spatial], X, last, level)
                if rounds is None:
                    continue
                reads = res.counts[(arch.levels[last].name, X.name)][1]
                assert rounds <= reads, (arch.name, op, X.name, level, m)
                fired += rounds > op.macs / math.prod(b for a, ds in spatial.items() for d, b in ds.items()
                                                      if d not in X.dims and last <= _axis_level(arch, a)
                                                      and arch.fanout_axis(_axis_level(arch, a), a).multicast)
            checked += 1
    assert checked >= 100 and fired >= 20, (checked, fired)


def test_padded_rounds_make_the_fc_energy_bound_exact():
    """ResNet-18 fc on edge_tpu_like, K = 1000 over 128 lanes (8 rounds, the last of 104) that multicast the inputs:
    the MACs read the 512 inputs from the activation memory once per round, 4,096 times, where B1 counted
    512,000 / 128 = 4,000. With B57 the bound's energy at the mapping's leaf is the model's, and from the root on,
    since the unrolling is known in advance."""
    arch = get_accelerator("edge_tpu_like")
    op = adopt_precision(dense("fc", c=512, k=1000), arch)
    loops = (Loop("K", 8, 0), Loop("C", 64, 1), Loop("K", 8, 2, "D1"), Loop("K", 4, 2, "D3"), Loop("K", 4, 2, "D4"),
             Loop("C", 8, 3, "D2"))
    keep = (frozenset({"W", "I", "O"}), frozenset({"I"}), frozenset(), frozenset({"O"}), frozenset())
    m = Mapping(loops, keep)
    res = evaluate(op, arch, m)
    assert res.counts[("ActMem", "I")][1] == 4096
    ctx = BusyLaneContext(op, arch, keep, unrolling_of(arch, m))
    for level in range(len(arch.levels) + 1):
        fixed, rem = _node(op, m, level)
        e, lat = ctx.lower_bound(fixed, level, rem, full_positions=full_positions(op, fixed))
        assert e == pytest.approx(res.energy_total, rel=1e-12), level
        if level <= 1:
            assert lat == res.latency == 64_314     # the weights' stream, the inputs' first load, the stores (B56)


def _axis_level(arch, axis: str) -> int:
    return next(i for i, lv in enumerate(arch.levels) if lv.fanout and any(a.name == axis for a in lv.fanout.axes))


@pytest.mark.parametrize(("sizes", "objective"), [({"k": 3, "p": 4, "r": 2}, "latency"),
                                                   ({"k": 3, "p": 5, "r": 3}, "edp")])
def test_exact_search_equals_exhaustive_where_the_first_fill_counts(sizes, objective):
    """A 1-D convolution on a small single-buffered buffer (one instance, fed by DRAM) over a 4-wide multicast fan-out:
    the exact search (no heuristic incumbent) finds the exhaustive Ruby-S optimum, proven, and at that optimum B56
    raises the leaf's latency bound (the inputs' first load before the output's stores)."""
    arch = buffer_over_four("24 B", "32 bit/cycle")
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", sizes, name="conv1d"), arch)
    got, st = search_exact(op, arch, objective, heuristic=False)
    want, _ = search_exhaustive(op, arch, objective, imperfect="spatial")
    assert st.extra["proven"] and got[0].value == want[0].value
    m = want[0].mapping
    leaf = dict.fromkeys(op.sizes, 1)
    bounds = []
    for terms in (None, []):
        ctx = BusyLaneContext(op, arch, m.keep, unrolling_of(arch, m))
        if terms is not None:
            ctx.first_fill_terms = terms
        bounds.append(ctx.lower_bound(m.loops, 0, leaf, full_positions=full_positions(op, m.loops))[1])
    assert bounds[1] < bounds[0] <= evaluate(op, arch, m).latency


def test_last_drains_follow_every_load_on_a_layer4_leaf():
    """Rule B59 on a costed leaf of ResNet-18 layer4.0.conv1's best unrolling on edge_tpu_like (P7 on D1, K4 on D3 and
    D4, C8 on D2): the weight memory's loads queue on DRAM's read port (B12, 154,656 cycles with the activation
    memory's input loads), and the activation memory's last output tile (512 x 7 x 7 partial sums at 16 bits over
    DRAM's 64-bit write port, 6,272 cycles) drains after all of them: the leaf's latency bound rises from 283,680 to
    289,952 cycles of the model's 290,456.875."""
    arch = get_accelerator("edge_tpu_like")
    op = adopt_precision(next(l for l in load_model("resnet18").layers if l.name == "layer4.0.conv1").operator, arch)
    L = Loop
    loops = (L("C", 2, 0), L("K", 32, 1), L("Q", 7, 1), L("C", 2, 2), L("S", 3, 2), L("P", 7, 2, "D1"),
             L("K", 4, 2, "D3"), L("K", 4, 2, "D4"), L("R", 3, 3), L("C", 8, 3, "D2"), L("C", 8, 4))
    keep = (frozenset("OIW"), frozenset("OI"), frozenset("W"), frozenset("O"), frozenset())
    m = Mapping(loops, keep)
    assert evaluate(op, arch, m).latency == 290_456.875
    ctx = BoundContext(op, arch, keep, unrolling_of(arch, m))
    leaf = dict.fromkeys(op.sizes, 1)
    b59 = [(c, per) for c, per in ctx.last_drain_terms if arch.levels[c].instances == 1]
    assert last_drain_cycles(op, b59, _fixed_tiles(op, m, 0)) == 6_272
    # rule B70 adds the 128 output registers' last partial sums (0.875 cycles)
    assert last_drain_cycles(op, ctx.last_drain_terms, _fixed_tiles(op, m, 0)) == 6_272.875
    assert ctx.lower_bound(loops, 0, leaf)[1] == 289_952.875
    ctx.last_drain_terms = []
    assert ctx.lower_bound(loops, 0, leaf)[1] == 283_680
