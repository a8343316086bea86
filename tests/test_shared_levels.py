"""A level shared along a fan-out axis (``shared_along``): one accumulator per array column that the
column's multipliers reduce into (ZigZag's rf_2B serving D2 on edge_tpu_like and ascend_like)."""

import math
import random
import re

import pytest

from accelmap.arch import accelerator_from_dict
from accelmap.cost.brute_force_counts import reference_counts
from accelmap.cost.model import access_counts, evaluate
from accelmap.errors import MappingError, SpecError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.validate import validate
from accelmap.sim import simulate
from accelmap.workload import gemm


def machine(shared=("A",), acc_bits=32):
    """DRAM over a 4 x 2 array (A reduces, B multicasts); a weight register per PE below B; an output
    accumulator below both, shared along ``shared``."""
    acc = {"name": "ACC", "holds": ["O"], "capacity": f"{acc_bits} bit", "width": "32 bit",
           "read_energy": "1 pJ", "write_energy": "2 pJ", "read_bandwidth": "32 bit/cycle"}
    if shared:
        acc["shared_along"] = list(shared)
    return accelerator_from_dict({"name": "columns", "compute": {"mac_energy": "1 pJ"}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit",
         "read_energy": "100 pJ", "read_bandwidth": "64 bit/cycle",
         "fanout": {"axes": [{"name": "A", "size": 4}, {"name": "B", "size": 2}]}},
        {"name": "RF", "holds": ["W"], "capacity": "8 bit", "width": "8 bit", "read_energy": "0.5 pJ",
         "written_at_clock_edge": True},
        acc]})


def test_instances_and_validation():
    assert machine().level("ACC").instances == 2 and machine(()).level("ACC").instances == 8
    assert machine(("A", "B")).level("ACC").instances == 1
    assert "one instance shared along A" in str(machine())
    for shared, msg in [(("X",), "levels[2].shared_along: 'X' is not an axis of a fan-out above level 'ACC'; "
                                 "valid: A, B"),
                        (("A", "A"), "names axis 'A' twice")]:
        with pytest.raises(SpecError, match=re.escape(msg)):
            machine(shared)
    # a level between the axis and the shared level that holds the same class must be shared too
    bad = {"name": "x", "compute": {"mac_energy": "1 pJ"}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "fanout": {"axes": [{"name": "A", "size": 2}]}},
        {"name": "MID", "holds": ["O"], "capacity": "1 KiB"},
        {"name": "ACC", "holds": ["O"], "capacity": "4 B", "shared_along": ["A"]}]}
    with pytest.raises(SpecError, match="level 'MID' above holds O too and sits below the axis"):
        accelerator_from_dict(bad)


def _gemm_mapping():
    # O[M, N] += A[M, K] * B[K, N], M=2, N=4, K=8: K split 4 on A (a column of multipliers reducing into the
    # shared accumulator) and 2 in time, N 2 on B and 2 in time, M in time
    op = gemm("g", m=2, n=4, k=8)
    loops = (Loop("M", 2, 0), Loop("N", 2, 0), Loop("K", 2, 0), Loop("K", 4, 0, "A"), Loop("N", 2, 0, "B"))
    return op, Mapping(loops, (frozenset({"A", "B", "O"}), frozenset({"B"}), frozenset({"O"})))


def test_a_column_reduces_into_one_accumulator():
    op, m = _gemm_mapping()
    O = op.output.name
    shared, per_pe = machine(), machine(())
    c = access_counts(op, shared, m)
    assert c == reference_counts(op, shared, m)
    assert access_counts(op, per_pe, m) == reference_counts(op, per_pe, m)
    # the 4 multipliers of a column add their products in the network and update the accumulator once per
    # cycle: 64 MACs / 4; each of the 2 used accumulators (one per B position) holds one output per time
    # step (M, N, K temporal: 8 outputs, each accumulated over K's 2 steps) and drains it once: 8 drains
    assert c[(2, O)].as_tuple() == (0, 16 - 8, 16, 8)
    assert c[(0, O)].updates == 8 and c[(0, O)].reads == 0
    # one accumulator per multiplier: every multiplier updates its own, and 4 x as many partial sums
    # leave them to be reduced on the way up
    assert access_counts(op, per_pe, m)[(2, O)].as_tuple() == (0, 64 - 32, 64, 32)
    r = evaluate(op, shared, m)
    assert r.energy[("ACC", O)] == pytest.approx((8 + 8) * 1 * 32 / 32 + (16) * 2 * 32 / 32)


def test_the_model_and_the_simulator_agree_on_a_shared_level():
    op, m = _gemm_mapping()
    arch = machine()
    assert simulate(op, arch, m, functional=False).cycles == pytest.approx(evaluate(op, arch, m).latency, rel=0.02)


def test_a_shared_axis_runs_only_over_dims_the_shared_level_does_not_use():
    op = gemm("g", m=2, n=4, k=8)
    arch = machine()
    # N2@A: the accumulator shared along A would hold two outputs, one per half of the column
    m = Mapping((Loop("M", 2, 0), Loop("K", 8, 0), Loop("N", 2, 0), Loop("N", 2, 0, "A")),
                (frozenset({"A", "B", "O"}), frozenset({"B"}), frozenset({"O"})))
    with pytest.raises(MappingError, match="spatial loop N2 on axis A: ACC is shared along A, one instance holding "
                                           "one tile for the whole axis, so the axis may only run over dims its "
                                           "operands do not use"):
        validate(op, arch, m)


def test_the_mappers_lower_bounds_hold_on_a_shared_level():
    """Without leaving the operands kept at a shared level out of the bound rules (``BoundContext.loose``),
    17 of these bounds exceed the cost."""
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.mapping.sampling import random_mapping
    from accelmap.search.bounds import BoundContext, chain_options
    from accelmap.search.space import Constraints, keep_options
    from accelmap.search.spatial import spatial_lower_bound
    from strategies import random_operator
    from test_bounds_with_timing_properties import COLUMNS, _variant

    rng = random.Random(1)
    reducing = 0
    for n in range(300):
        arch = _variant(COLUMNS, stream=n % 3 == 0)
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30)
        except MappingError:
            continue
        reducing += op.output.name in m.keep[3] and any(
            l.axis == "A" and l.bound > 1 and l.dim not in op.output.dims for l in m.loops)
        res = evaluate(op, arch, m)
        ctx = BoundContext(op, arch, m.keep)
        for level in range(len(arch.levels)):
            fixed = tuple(l for l in m.loops if l.level >= level)
            rem = dict(op.sizes)
            for l in fixed:
                rem[l.dim] //= l.bound
            e_lb, l_lb = ctx.lower_bound(fixed, level, rem)
            assert e_lb <= res.energy_total * (1 + 1e-12) and l_lb <= res.latency * (1 + 1e-12), (level, m)
        every = chain_options(op, keep_options(op, arch, Constraints()))
        e_lb, l_lb = spatial_lower_bound(op, arch, tuple(l for l in m.loops if l.spatial), every)
        assert e_lb <= res.energy_total * (1 + 1e-12) and l_lb <= res.latency * (1 + 1e-12), m
    assert reducing >= 15     # mappings whose column of multipliers reduces into the shared accumulator


def _random_columns_cases(count: int):
    """Random mappings of the codegen operators on a machine whose accumulator is shared along axis A."""
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.mapping.sampling import random_mapping
    from test_codegen import OPERATORS

    arch = machine()
    rng = random.Random(7)
    out = []
    for k in range(200):
        op = adopt_precision(OPERATORS[k % len(OPERATORS)], arch)
        try:
            m = random_mapping(op, arch, rng, imperfect=bool(k % 2), check_fit=True)
        except MappingError:
            continue
        if op.output.name in m.keep[2] and any(l.axis == "A" and l.bound > 1 for l in m.loops):
            out.append((op, arch, m))
        if len(out) == count:
            break
    return out


@pytest.mark.parametrize("case", _random_columns_cases(4), ids=lambda c: c[0].name)
def test_generated_c_counts_a_shared_level_as_the_model(case):
    """The generated C keeps one buffer per shared instance; its results equal NumPy's and its counters the
    model's and the brute-force twin's."""
    from generated_c import generated_counts

    op, arch, m = case
    same, code = generated_counts(op, arch, m)
    assert same
    assert code == {key: c.as_tuple() for key, c in access_counts(op, arch, m).items()}
    assert code == {key: c.as_tuple() for key, c in reference_counts(op, arch, m).items()}


def test_the_exact_mapper_finds_the_exhaustive_optimum_with_shared_and_generated():
    """The branch and bound (its bounds leaving out what they cannot count) returns the best mapping the
    exhaustive enumeration finds (696 mappings), on TINY with its register holding only the output, shared
    along X, and padded halos generated, for a padded convolution; the optimum reduces C over X into it."""
    import copy

    from accelmap.arch.accelerator import adopt_precision
    from accelmap.search.exhaustive import search_exhaustive
    from accelmap.search.optimal import search_optimal
    from accelmap.workload import conv2d
    from test_model_mapper import TINY

    spec = copy.deepcopy(TINY)
    spec["levels"][2].update(holds=["O"], shared_along=["X"])
    spec["padding"] = "generated"
    arch = accelerator_from_dict(spec, "tiny shared")
    op = adopt_precision(conv2d("c", c=2, h=2, w=1, k=1, r=3, s=1, padding=(1, 0, 1, 0)), arch)
    every, stats = search_exhaustive(op, arch, "edp")
    best, _ = search_optimal(op, arch, "edp")
    assert stats.evaluated == 696
    assert best[0].value == pytest.approx(every[0].value, rel=1e-12) == pytest.approx(1214.1, rel=1e-9)
    assert Loop("C", 2, 1, "X") in best[0].mapping.loops


def test_loop_order_pruning_keeps_the_least_energy_order_with_shared_and_generated():
    """``search.orders`` counts each operand's tile entries as if no level were shared and every halo moved.
    On a shared level the count per instance is that over fewer instances, and a generated halo leaves out the
    same halo rows at every entry of a tile spanning the padded axis: a positive factor per (operand, level)
    that no order of a level changes, so the dominance between orders, and the orders kept, are the same. Brute
    force: for random perfect mappings on the machine with a shared accumulator and generated halos, for every
    level with 2-4 temporal loops, the least energy over the kept orders is the least over all permutations."""
    import itertools
    from dataclasses import replace

    from accelmap.arch.accelerator import adopt_precision
    from accelmap.cost import evaluate
    from accelmap.mapping.sampling import random_mapping
    from accelmap.search.orders import order_candidates
    from accelmap.workload import conv2d

    arch = replace(machine(), padding_generated=True)
    rng = random.Random(3)
    shapes = [dict(c=2, h=4, w=3, k=2, r=3, s=2, padding=1), dict(c=4, h=3, w=3, k=2, r=2, s=2, padding=(1, 0, 1, 0)),
              dict(c=2, h=6, w=2, k=4, r=3, s=1, padding=(1, 0, 1, 0), stride=(2, 1))]
    compared = pruned = 0
    for k in range(30):
        op = adopt_precision(conv2d("c", **shapes[k % len(shapes)]), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30)
        except MappingError:
            continue
        nlev = len(arch.levels)
        for level in range(nlev - 1):
            own = tuple(l for l in m.loops if l.level == level and not l.spatial and l.bound > 1)
            if not 2 <= len(own) <= 4:
                continue
            rest = tuple(l for l in m.loops if l.level > level or (l.level == level and l.spatial))
            above = tuple(l for l in m.loops if l.level < level)

            def energy(order, op=op, above=above, rest=rest, keep=m.keep):
                return evaluate(op, arch, Mapping(above + order + rest, keep), check=False).energy_total

            kept = order_candidates(op, m.keep, level, tuple(sorted(own, key=lambda l: l.dim)), rest, nlev)
            best_all = min(energy(p) for p in itertools.permutations(own))
            assert min(energy(p) for p in kept) == pytest.approx(best_all, rel=1e-12), (m, level)
            compared += 1
            pruned += len(kept) < math.factorial(len(own))
    assert compared >= 10 and pruned >= 5
