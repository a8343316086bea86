"""Rule B73 (docs/mapper.md): the output's drains from a double-buffered level follow every other prologue and
epilogue term. The term stays below the model's latency, and the node bound with it below the mapping's cost, at every
level of random perfect, imperfect and padded mappings of every preset; the batched bound equals the scalar one
(``test_search_node_bounds``); on ResNet-18 conv1 on ascend_like it makes the bound of the best mapping found with L0B
fixed its latency, 50,854.5625 cycles (50,176 before); the exact search still equals the exhaustive one on a small
space where the rule raises the bound."""

import copy
import random

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.schema import accelerator_from_dict
from accelmap.cost.model import evaluate
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.search import search_exhaustive
from accelmap.search.bounds import BoundContext
from accelmap.search.drain_after_prologue import drain_lead_terms, drains_after_prologue_cycles
from accelmap.search.exact import search_exact
from accelmap.search.imperfect_tiles import full_positions
from accelmap.search.last_step import last_step_cycles
from accelmap.search.padded_busy_lanes import BusyLaneContext
from accelmap.search.spatial import unrolling_of
from accelmap.workload import parse_expression
from accelmap.workload.models import load_model
from test_bound_first_fill import _node, bound_cases  # the node a mapping fixes at a level, sizes left rounded up
from test_bound_padded_rounds import padded_ruby_s_mappings
from test_bound_prologue import _fixed_tiles

ALL_PRESETS = ["eyeriss_like", "simba_like", "tpu_like", "edge_tpu_like", "ascend_like", "vta_like", "vta_8x8x8",
               "diana_like", "aie_like"]


def _output_bits(ctx, op, m):
    """The output's (level, kind, bits) at the model's counts of mapping ``m`` at the output's fewest bits: what
    the node bound's counts are lower bounds of."""
    from accelmap.cost.nest_rows import fewest_bits
    res = evaluate(op, ctx.arch, m)
    w = fewest_bits(op.output, ctx.arch)
    out = []
    for c in ctx.chains[op.output.name]:
        fills, reads, updates, drains = res.counts[(ctx.arch.levels[c].name, op.output.name)]
        out += [(c, "drains", drains * w), (c, "updates", updates * w)]
    return out


@pytest.mark.parametrize("arch_name", ALL_PRESETS)
def test_drains_after_the_prologue_never_exceed_the_latency(arch_name):
    """At every level of random perfect and imperfect mappings (the mapping's own unrolling fixed, as the exact search
    fixes it): B73's term over the model's own counts is at most the latency, and so is the node bound."""
    rng = random.Random(73)
    arch = get_accelerator(arch_name)
    checked = 0
    for op, m, res, imperfect, ctx in bound_cases(arch, rng, 30):
        bits = _output_bits(ctx, op, m)
        for level in range(len(arch.levels) + 1):
            fixed, rem = _node(op, m, level)
            leads = drain_lead_terms(ctx, ctx.edge_cycle_terms(_fixed_tiles(op, m, level), level),
                                     lambda c, fixed=fixed: last_step_cycles(fixed, c, arch.compute.macs_per_cycle))
            term = float(drains_after_prologue_cycles(arch, leads, bits))
            assert term <= res.latency * (1 + 1e-12), (level, m, term, res.latency_parts)
            whole = full_positions(op, fixed) if imperfect else None
            assert ctx.lower_bound(fixed, level, rem, full_positions=whole)[1] <= res.latency * (1 + 1e-12), \
                (level, m)
        checked += 1
    assert checked >= 20


def test_drains_after_the_prologue_fire_on_an_output_heavy_operator():
    """Random perfect and imperfect mappings of a 1-D convolution with many outputs (K = 32, P = 512, R = 3) on
    ascend_like, whose output stream to DRAM is often the longest: at every level the node bound stays below the
    latency, and B73 raises it at some nodes (random small operators rarely drain enough for it to)."""
    arch = get_accelerator("ascend_like")
    rng = random.Random(73)
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", {"k": 32, "p": 512, "r": 3}, name="c"), arch)
    checked = fired = 0
    for _, m, res, imperfect, ctx in bound_cases(arch, rng, 40, op):
        off = copy.copy(ctx)
        off.drains_after_prologue = False
        for level in range(len(arch.levels) + 1):
            fixed, rem = _node(op, m, level)
            whole = full_positions(op, fixed) if imperfect else None
            on = ctx.lower_bound(fixed, level, rem, full_positions=whole)[1]
            assert on <= res.latency * (1 + 1e-12), (level, m)
            fired += on > off.lower_bound(fixed, level, rem, full_positions=whole)[1]
        checked += 1
    assert checked >= 30 and fired >= 8, (checked, fired)


def test_drains_after_the_prologue_on_padded_mappings():
    """Rule B73 at every level of random padded Ruby-S mappings of ascend_like and tpu_like (the unrolling fixed in
    advance): the node bound stays below the mapping's energy and latency."""
    checked = 0
    archs = [get_accelerator("ascend_like"), get_accelerator("tpu_like")]
    for arch, op, m, spatial in padded_ruby_s_mappings(120, archs, 73):
        res = evaluate(op, arch, m)
        ctx = BusyLaneContext(op, arch, m.keep, spatial)
        for level in range(len(arch.levels) + 1):
            fixed, rem = _node(op, m, level)
            got = ctx.lower_bound(fixed, level, rem, full_positions=full_positions(op, fixed))
            assert got[0] <= res.energy_total * (1 + 1e-12) and got[1] <= res.latency * (1 + 1e-12), \
                (arch.name, op, level, m)
        checked += 1
    assert checked >= 15, checked


def test_conv1_drains_follow_the_first_tiles_on_ascend_like():
    """ResNet-18 conv1 on ascend_like, the heuristic's best mapping: the output streams from L0C to DRAM for 50,176
    cycles (802,816 outputs at 16 bits over DRAM's 256-bit write port), after L0A's and L0B's first tiles (48.5625 and
    588 cycles) and before the last drain (64). With L0B fixed the bound was the DRAM write port's 50,176 cycles; with
    B73 it is 50,854.5625, the model's latency (with the first output tile's 42 cycles of compute: C3, K2, S7 at L0B)."""
    arch = get_accelerator("ascend_like")
    op = adopt_precision(next(x for x in load_model("resnet18").layers if x.name == "conv1").operator, arch)
    loops = (Loop("P", 7, 0), Loop("Q", 112, 1), Loop("C", 3, 5), Loop("K", 2, 5), Loop("S", 7, 5),
             Loop("K", 16, 5, "X"), Loop("P", 16, 5, "Y"), Loop("K", 2, 5, "Z"), Loop("R", 7, 5, "Z"))
    keep = (frozenset("WIO"), frozenset(), frozenset(), frozenset("O"), frozenset("I"), frozenset("W"))
    m = Mapping(loops, keep)
    assert evaluate(op, arch, m).latency == 50_854.5625
    fixed, rem = _node(op, m, 5)
    got = []
    for on in (True, False):
        ctx = BoundContext(op, arch, keep, unrolling_of(arch, m))
        ctx.drains_after_prologue = on
        got.append(ctx.lower_bound(fixed, 5, rem)[1])
    assert got == [50_854.5625, 50_176.0]


def _buffers_over_four():
    """DRAM over a double-buffered accumulator (the output) over a double-buffered operand buffer whose 4-wide
    multicast fan-out feeds the MACs: ascend_like's L0C and L0A/L0B in small."""
    return accelerator_from_dict({"name": "acc4", "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "16 bit",
         "read_energy": "50 pJ", "write_energy": "50 pJ", "read_bandwidth": "32 bit/cycle",
         "write_bandwidth": "8 bit/cycle"},
        {"name": "Acc", "holds": ["O"], "capacity": "64 B", "width": "16 bit", "read_energy": "2 pJ",
         "write_energy": "2 pJ", "double_buffered": True},
        {"name": "Buf", "holds": ["I", "W"], "capacity": "32 B", "width": "16 bit", "read_energy": "2 pJ",
         "write_energy": "2 pJ", "double_buffered": True, "fanout": {"axes": [
             {"name": "X", "size": 4, "multicast": True, "reduce": False}], "transfer_energy": "1 pJ"}}],
        "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 16}}})


def test_exact_search_equals_exhaustive_where_the_drains_follow_the_prologue():
    """A 1-D convolution whose outputs drain from the double-buffered accumulator over a narrow DRAM write port: the
    exact search (no heuristic incumbent) finds the exhaustive optimum (EDP), proven, and at that optimum's leaf B73
    raises the latency bound from 16 cycles to its latency, 19.25."""
    arch = _buffers_over_four()
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", {"k": 2, "p": 4, "r": 2}, name="conv1d"), arch)
    got, st = search_exact(op, arch, "edp", heuristic=False)
    want, _ = search_exhaustive(op, arch, "edp", imperfect="spatial")
    assert st.extra["proven"] and got[0].value == want[0].value
    m = want[0].mapping
    bounds = []
    for on in (True, False):
        ctx = BusyLaneContext(op, arch, m.keep, unrolling_of(arch, m))
        ctx.drains_after_prologue = on
        bounds.append(ctx.lower_bound(m.loops, 0, dict.fromkeys(op.sizes, 1),
                                      full_positions=full_positions(op, m.loops))[1])
    assert bounds == [19.25, 16.0] and evaluate(op, arch, m).latency == 19.25, bounds
