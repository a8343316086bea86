"""Rules B70 and B71 (docs/mapper.md). B70: the output's last drains from single-buffered levels fed through a fan-out
follow every load, the parent's write port taking the distinct output tiles of every busy instance below it. B71: the
first tiles' loads that one parent's read port paces queue on it, the port taking the distinct input tiles of every
busy instance below it. Each term stays below the model's single-buffer stall and the node bound below the cost at
every level of random mappings (perfect and imperfect); on simba_like's ResNet-18 layer3.0.conv2 B70 adds the
accumulation buffers' last tiles to a leaf's bound exactly, on layer1.0.conv1 B71 the weight buffers' first tiles; the
exact search keeps the exhaustive optimum where they count."""

import math
import random

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.schema import accelerator_from_dict
from accelmap.cost.model import evaluate
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.search import search_exhaustive
from accelmap.search.bounds import BoundContext
from accelmap.search.exact import search_exact
from accelmap.search.first_fill import first_block_cycles, last_drain_cycles
from accelmap.search.imperfect_tiles import full_positions
from accelmap.search.space import Constraints
from accelmap.search.spatial import unrolling_of
from accelmap.workload import parse_expression
from accelmap.workload.models import load_model
from test_bound_first_fill import _node, bound_cases  # the node a mapping fixes at a level, sizes left rounded up
from test_bound_prologue import _fixed_tiles


def accumulators_over_dram(capacity: str = "24 B", port: str = "16 bit/cycle"):
    """DRAM whose 4-wide fan-out (multicast, reducing) feeds four single-buffered PE buffers (Simba's PEs in small)."""
    return accelerator_from_dict({"name": "acc4", "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "16 bit",
         "read_energy": "50 pJ", "write_energy": "50 pJ", "read_bandwidth": port, "write_bandwidth": port,
         "fanout": {"axes": [{"name": "X", "size": 4, "multicast": True, "reduce": True}],
                    "transfer_energy": "1 pJ"}},
        {"name": "PEBuf", "holds": ["I", "W", "O"], "capacity": capacity, "width": "16 bit",
         "read_energy": "2 pJ", "write_energy": "2 pJ"}],
        "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 32}}})


@pytest.mark.parametrize("arch_name", ["simba_like", "eyeriss_like", "tpu_like", "edge_tpu_like", "ascend_like",
                                       "diana_like", "acc4"])
def test_spread_last_drains_never_exceed_the_models_stall(arch_name):
    rng = random.Random(70)
    arch = accumulators_over_dram() if arch_name == "acc4" else get_accelerator(arch_name)
    checked = fired = queued = 0
    for op, m, res, imperfect, ctx in bound_cases(arch, rng, 24):
        stall = dict(res.latency_parts)["single-buffer stalls"]
        spread = [(c, per) for c, per in ctx.last_drain_terms
                  if arch.levels[c].instances > 1 or arch.levels[ctx.chains["O"][ctx.chains["O"].index(c) - 1]]
                  .instances > 1]
        for level in range(len(arch.levels) + 1):
            if not imperfect:
                last = float(last_drain_cycles(op, ctx.last_drain_terms, _fixed_tiles(op, m, level)))
                assert last <= stall * (1 + 1e-12) + 1e-9, (level, m, last, stall)
                first = float(first_block_cycles(op, ctx.first_fill_terms, ctx.first_queue_terms,
                                                 _fixed_tiles(op, m, level)))
                assert first + last <= stall * (1 + 1e-12) + 1e-9, (level, m, first, last, stall)
                queued += float(first_block_cycles(op, [], ctx.first_queue_terms, _fixed_tiles(op, m, level))) > \
                    float(first_block_cycles(op, ctx.first_fill_terms, [], _fixed_tiles(op, m, level)))
                fired += float(last_drain_cycles(op, spread, _fixed_tiles(op, m, level))) > 0
            fixed, rem = _node(op, m, level)
            whole = full_positions(op, fixed) if imperfect else None
            assert ctx.lower_bound(fixed, level, rem, full_positions=whole)[1] <= res.latency * (1 + 1e-12), \
                (level, m)
        checked += 1
    assert checked >= 12
    if arch_name in ("simba_like", "acc4"):
        assert fired >= 10 and queued >= 10, (fired, queued)


def test_accumulation_buffers_last_tiles_on_a_simba_like_leaf():
    """A mapping the exact search found for ResNet-18 layer3.0.conv2 on simba_like (K4 x K4 over the PEs, the output in
    the accumulation buffers straight from DRAM): at its leaf the loads queue on DRAM's read port (B12, 81,920 cycles),
    and after them the 16 accumulation buffers drain their last tiles, 14 x 14 x 2 partial sums each (K2 x P2 x Q2 on
    the vector lanes, P7 x Q7 in time), 6,272 distinct outputs at 24 bits over DRAM's 64-bit write port: 2,352 cycles.
    The leaf's latency bound rises from 194,816 to 197,168 of the model's 205,568."""
    arch = get_accelerator("simba_like")
    op = adopt_precision(next(x for x in load_model("resnet18").layers if x.name == "layer3.0.conv2").operator, arch)
    L = Loop
    loops = (L("K", 8, 0), L("C", 8, 1), L("K", 4, 1, "PX"), L("K", 4, 1, "PY"), L("C", 4, 3), L("R", 3, 3),
             L("S", 3, 3), L("P", 7, 4), L("Q", 7, 4), L("K", 2, 4, "VK"), L("P", 2, 4, "VK"), L("Q", 2, 4, "VK"),
             L("C", 8, 4, "VC"))
    keep = (frozenset("OWI"), frozenset("I"), frozenset(), frozenset("W"), frozenset("O"))
    m = Mapping(loops, keep)
    assert evaluate(op, arch, m).latency == 205_568
    ctx = BoundContext(op, arch, keep, unrolling_of(arch, m))
    leaf = dict.fromkeys(op.sizes, 1)
    assert last_drain_cycles(op, ctx.last_drain_terms, _fixed_tiles(op, m, 0)) == 2_352
    assert ctx.lower_bound(loops, 0, leaf)[1] == 197_168
    ctx.last_drain_terms = []
    assert ctx.lower_bound(loops, 0, leaf)[1] == 194_816


def test_weight_buffers_first_tiles_on_a_simba_like_leaf():
    """A mapping the exact search found for ResNet-18 layer1.0.conv1 on simba_like (K4 x K4 over the PEs): the first
    tiles queue on DRAM's read port before the output's stores, the inputs' into the global buffer and the weights'
    into the 16 weight buffers (all 36,864 weights, 2,304 in each, at 8 bits over the 64-bit port: 4,608 cycles). The
    leaf's latency bound rises from 188,400 to 193,008 of the model's 193,872."""
    arch = get_accelerator("simba_like")
    op = adopt_precision(next(x for x in load_model("resnet18").layers if x.name == "layer1.0.conv1").operator, arch)
    L = Loop
    loops = (L("P", 7, 0), L("Q", 56, 0), L("P", 2, 1), L("K", 4, 1, "PX"), L("K", 4, 1, "PY"), L("C", 8, 3),
             L("R", 3, 3), L("S", 3, 3), L("K", 2, 4), L("K", 2, 4, "VK"), L("P", 4, 4, "VK"), L("C", 8, 4, "VC"))
    keep = (frozenset("OWI"), frozenset("I"), frozenset(), frozenset("W"), frozenset("O"))
    m = Mapping(loops, keep)
    assert evaluate(op, arch, m).latency == 193_872
    ctx = BoundContext(op, arch, keep, unrolling_of(arch, m))
    leaf = dict.fromkeys(op.sizes, 1)
    assert ctx.lower_bound(loops, 0, leaf)[1] == 193_008
    ctx.first_queue_terms = []
    assert ctx.lower_bound(loops, 0, leaf)[1] == 188_400


@pytest.mark.parametrize(("sizes", "objective"), [({"k": 4, "p": 2, "r": 8}, "latency"),
                                                   ({"k": 8, "p": 2, "r": 6}, "edp")])
def test_exact_search_equals_exhaustive_where_the_spread_transfers_count(sizes, objective):
    """A 1-D convolution on four single-buffered PE buffers under DRAM's 4-wide fan-out, every operand kept in them:
    the exact search (no heuristic incumbent) finds the exhaustive Ruby-S optimum, proven, and at that optimum (its
    unrolling dividing) B70 and B71 raise the leaf's latency bound (to the model's latency with K = 4, P = 2, R = 8)."""
    arch = accumulators_over_dram("24 B", "32 bit/cycle")
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", sizes, name="conv1d"), arch)
    cons = Constraints(keep={"PEBuf": frozenset("IWO")})
    got, st = search_exact(op, arch, objective, heuristic=False, constraints=cons)
    want, _ = search_exhaustive(op, arch, objective, imperfect="spatial", constraints=cons)
    assert st.extra["proven"]
    assert math.isclose(got[0].value, want[0].value, rel_tol=1e-12)
    m = got[0].mapping
    ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
    leaf = dict.fromkeys(op.sizes, 1)
    latency = evaluate(op, arch, m).latency
    with_rules = ctx.lower_bound(m.loops, 0, leaf)[1]
    ctx.last_drain_terms = ctx.first_queue_terms = []
    assert ctx.lower_bound(m.loops, 0, leaf)[1] < with_rules <= latency
    if sizes == {"k": 4, "p": 2, "r": 8}:
        assert with_rules == latency
