"""Rule F: the latency that single-buffered levels' fills force holds for every mapping, and the co-search that
prunes with it loses nothing: the configurations it prunes are worse at their true optimum (exhaustive search).
Rule R (the exact search's root bounds per configuration) against the same brute force."""

import itertools
import math

import pytest

from accelmap.arch import accelerator_from_dict
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.dse.fill_stall_bound import fill_stall_bound
from accelmap.dse.memory_search import co_search, config_arch, grid_search, lower_bound
from accelmap.dse.root_bound import beaten_by_root_bounds, root_lower_bound
from accelmap.search.baselines import search_random
from accelmap.search.mapper import map_operator
from accelmap.search.unrolling_stall import choice_stall_cycles
from accelmap.workload.constructors import gemm

LEVELS = ("L1I", "L1W", "L1O")


def _base(bypass: bool = True, double_buffered: bool = False):
    """One PE with three single-class buffers straight under a DRAM that delivers one word a cycle: every input
    word a buffer takes arrives while the PE waits, unless the buffer is double-buffered."""
    dram = {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit",
            "read_energy": "1 pJ", "write_energy": "1 pJ", "read_bandwidth": "1 words/cycle"}
    lv = [dram] + [{"name": f"L1{c}", "holds": [c], "capacity": "16 words", "width": "8 bit", "bypass": bypass,
                    "double_buffered": double_buffered} for c in "IWO"]
    return accelerator_from_dict({"name": "pe", "compute": {"mac_energy": "0.1 pJ",
                                                            "precision": {"I": 8, "W": 8, "O": 8}}, "levels": lv})


def test_parts_of_the_bound():
    # The stall term is the exact search's (rule S7), per bypass choice.
    arch = _base()
    g = adopt_precision(gemm("g", m=2, n=3, k=4), arch)
    name = {X.cls: X.name for X in g.operands}

    def chains(i, w):
        return {name["I"]: i, name["W"]: w, name["O"]: (0, 3)}

    # Both inputs through L1 on the one DRAM read port: 2x4 + 4x3 words at one word a cycle, summed.
    assert choice_stall_cycles(g, arch, chains((0, 1), (0, 2))) == 8 + 12
    assert choice_stall_cycles(g, arch, chains((0,), (0, 2))) == 12     # the input streams from DRAM: no stall
    db = _base(double_buffered=True)
    assert choice_stall_cycles(g, db, chains((0, 1), (0, 2))) == 0       # fills overlap compute


def test_stall_bound_is_below_every_sampled_mappings_stalls_and_the_bound_below_its_edp():
    base = _base()
    op = adopt_precision(gemm("g", m=4, n=4, k=4), base)
    checked = 0
    for c in ((1, 1, 1), (4, 16, 4), (16, 16, 16)):
        arch = config_arch(base, LEVELS, c)
        bound = fill_stall_bound(op, arch, "edp")
        assert bound.value >= bound.h_value and bound.choices == 4 ** 0 * 2 ** 3
        found, _ = search_random(op, arch, "edp", k=30, seed=1, max_samples=120)
        for f in found:
            r = evaluate(op, arch, f.mapping)
            chains = {X.name: tuple(i for i, kp in enumerate(f.mapping.keep) if X.name in kp) for X in op.operands}
            stalls = dict(r.latency_parts)["single-buffer stalls"]
            assert stalls >= choice_stall_cycles(op, arch, chains) - 1e-9
            assert r.latency >= op.macs + choice_stall_cycles(op, arch, chains) - 1e-9
            assert r.edp >= bound.value * (1 - 1e-9)
            checked += 1
    assert checked > 45


@pytest.fixture(scope="module")
def brute_force():
    """Every configuration of L1 sizes {2, 4096} words (bypass off, so the exhaustive search is fast) with its true
    optimum by exhaustive search."""
    base = _base(bypass=False)
    op = adopt_precision(gemm("g", m=2, n=2, k=2), base)
    configs = list(itertools.product((2, 4096), repeat=3))
    best = {}
    for c in configs:
        r = map_operator(op, config_arch(base, LEVELS, c), "edp", strategy="exhaustive", time_limit=60)
        assert r.proven_optimal
        best[c] = (r.best.value, r.best.mapping)
    return base, op, configs, best


def test_rule_f_prunes_only_configurations_worse_at_their_optimum(brute_force):
    base, op, configs, best = brute_force

    def mapper(c, arch):
        return best[c]

    grid = grid_search(op, base, LEVELS, configs, mapper)
    with_f = co_search(op, base, LEVELS, (2, 4096), configs, mapper, fill_stalls=True)
    without = co_search(op, base, LEVELS, (2, 4096), configs, mapper)
    assert with_f.value == grid.value == without.value == min(v for v, _ in best.values())
    # The largest configuration is pruned with or without rule F: the search's own certificate now counts the
    # single-buffered fills under every unrolling (rule S7 of the exact search), which is what rule F added to
    # rules H and C, so on this space F raises no configuration's bound beyond the certificate's ...
    assert with_f.pruned_by_bound == without.pruned_by_bound == [(4096, 4096, 4096)]
    assert len(with_f.mapped) == len(without.mapped) == 7
    assert with_f.raised_by_fill_stalls == []
    assert all(with_f.lower_bounds[c] == without.lower_bounds[c] for c in configs)
    # ... and every configuration it prunes is no better at its true optimum, whose value is at least its bound.
    for c in with_f.pruned_by_bound:
        assert best[c][0] >= with_f.value
    for c in configs:
        assert best[c][0] >= with_f.lower_bounds[c] * (1 - 1e-9)
        assert with_f.lower_bounds[c] >= lower_bound(op, config_arch(base, LEVELS, c), "edp")
    assert math.isclose(with_f.lower_bounds[(4096, 4096, 4096)] / best[(4096, 4096, 4096)][0], 0.889, abs_tol=0.01)


def test_rule_r_prunes_only_configurations_no_better_at_their_optimum(brute_force):
    base, op, configs, best = brute_force
    optimum = min(v for v, _ in best.values())
    # Against the optimum as the bar: the largest configuration (13.8% worse) and, since rules B56 and B59 (the first
    # fills and the last drains of single-buffered levels add to their stores and loads), the three with two
    # 4096-word buffers (6.1-7.7% worse) are beaten by the exact search's root bounds; one PE means one unrolling, so
    # the kept ones' ratio is a bound on the configuration.
    checks = {c: beaten_by_root_bounds(op, config_arch(base, LEVELS, c), "edp", optimum) for c in configs}
    two_large = [c for c in configs if sorted(c) == [2, 4096, 4096]]
    assert [c for c, r in checks.items() if r.beaten] == [*two_large, (4096, 4096, 4096)]
    assert best[(4096, 4096, 4096)][0] > optimum * 1.13
    assert all(best[c][0] > optimum * 1.06 for c in two_large)
    for c, r in checks.items():
        # The largest is cut by its unrolling's S1 bound alone (which counts single-buffered fills, rule S7),
        # before any root bound; each other one has its one unrolling bounded at the root.
        assert r.unrollings_bounded == (0 if c == (4096, 4096, 4096) else 1)
        if not r.beaten:
            assert r.ratio * optimum <= best[c][0] * (1 + 1e-9)

    def mapper(c, arch):
        return best[c]

    # In the co-search the bar is the best found so far: the answer is the grid's, and what rule R prunes is no
    # better at its true optimum.
    with_r = co_search(op, base, LEVELS, (2, 4096), configs, mapper, capacity_bound=False, root_bounds=True)
    assert with_r.value == optimum
    # The certificate (rule H, whose S1 part counts single-buffered fills) already prunes the largest one; rule R
    # prunes the three with two large buffers.
    assert with_r.pruned_by_bound == [(4096, 4096, 4096)] and with_r.pruned_by_root_bounds == [(4096, 4096, 2), (4096, 2, 4096), (2, 4096, 4096)]
    for c in with_r.pruned_by_root_bounds:
        assert best[c][0] >= with_r.value


def test_rule_r_as_the_order_cuts_every_configuration_its_bound_reaches(brute_force):
    base, op, configs, best = brute_force
    optimum = min(v for v, _ in best.values())

    def mapper(c, arch):
        return best[c]

    # Without a bar: one PE means one unrolling, so the bound is that unrolling's S1 bound raised by its root bound,
    # complete, and it is the kept configurations' ratio times the bar of the check against the optimum.
    for c in configs:
        arch = config_arch(base, LEVELS, c)
        rb = root_lower_bound(op, arch, "edp", unrollings=1)
        check = beaten_by_root_bounds(op, arch, "edp", optimum)
        assert rb.complete and rb.unrollings_bounded == 1
        assert rb.value <= best[c][0] * (1 + 1e-9)
        assert check.beaten == (rb.value >= optimum)
        if check.ratio is not None:
            assert rb.value == pytest.approx(check.ratio * optimum, rel=1e-12)
        # With no unrolling bounded at the root it is the S1 bound alone, not above.
        assert root_lower_bound(op, arch, "edp", unrollings=0).value <= rb.value
    res = co_search(op, base, LEVELS, (2, 4096), configs, mapper, capacity_bound=False, root_order=True)
    h = co_search(op, base, LEVELS, (2, 4096), configs, mapper, capacity_bound=False)
    assert res.value == h.value == optimum
    # Every configuration whose raised bound reaches the answer is cut, and no other: H's cut, and the three with two
    # large buffers that R's bound reaches (with rules B56 and B59 in the root bound).
    cut = set(res.pruned_by_bound) | set(res.pruned_by_root_bounds)
    assert cut == {c for c in configs if res.lower_bounds[c] >= optimum} == \
        {(4096, 4096, 4096), (4096, 4096, 2), (4096, 2, 4096), (2, 4096, 4096)}
    assert sorted(res.mapped) == sorted(set(configs) - cut)
    for c in configs:
        assert h.lower_bounds[c] <= res.lower_bounds[c] <= best[c][0] * (1 + 1e-9)
    # R's bound is above H's certificate on every configuration here (rules B56 and B59), and cuts three.
    assert sorted(res.raised_by_root_bounds) == sorted(configs) and res.pruned_by_root_bounds == [(4096, 4096, 2), (4096, 2, 4096), (2, 4096, 4096)]
    assert res.bound_seconds > 0


def test_rule_r_as_the_order_cuts_what_h_maps_and_keeps_the_grids_answer():
    # The space of the CLI test of rule R: a 1-, 2- or 4096-word input buffer beside a 2- or 4096-word output
    # buffer, neither bypassable. R's bound raises the 1-word input buffer with the 4096-word output buffer above
    # the answer, so R's order cuts it; H's bound alone maps every configuration.
    base = _base(bypass=False)
    op = adopt_precision(gemm("g", m=2, n=2, k=2), base)
    configs = [(i, 1, o) for i in (1, 2, 4096) for o in (2, 4096)]
    memo = {}

    def mapper(c, arch):
        # Deterministic: the best of a fixed random sample (the co-search's answer is the grid's for any mapper
        # that answers the same on a configuration every time).
        if c not in memo:
            found, _ = search_random(op, arch, "edp", k=1, seed=1, max_samples=15)
            memo[c] = (found[0].value, found[0].mapping)
        return memo[c]

    grid = grid_search(op, base, LEVELS, configs, mapper)
    h = co_search(op, base, LEVELS, ((1, 2, 4096), (1,), (2, 4096)), configs, mapper)
    res = co_search(op, base, LEVELS, ((1, 2, 4096), (1,), (2, 4096)), configs, mapper, root_order=True)
    assert res.value == h.value == grid.value
    assert len(h.mapped) == 6 and h.pruned_by_bound == []
    cut = {c for c in configs if res.lower_bounds[c] >= res.value}
    assert cut == {(1, 1, 4096)} and res.pruned_by_root_bounds == [(1, 1, 4096)] and res.pruned_by_bound == []
    assert sorted(res.mapped) == sorted(set(configs) - cut)
    assert res.raised_by_root_bounds and (1, 1, 4096) in res.raised_by_root_bounds
    for c in configs:
        # A bound: below the value of the mapping found on every configuration, and R's raise at least H's.
        assert h.lower_bounds[c] <= res.lower_bounds[c] <= memo[c][0] * (1 + 1e-9)
