"""Rule C: the energy bound that buffer capacities force (a red-blue pebble bound) holds for every mapping, and
the co-search that prunes with it keeps the grid's optimum."""

import itertools

import pytest

from accelmap.arch import accelerator_from_dict
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.dse.capacity_bound import _fill_evenly, _multiplicity, capacity_energy_bound, pe_levels
from accelmap.dse.memory_search import co_search, config_arch, grid_search, lower_bound
from accelmap.errors import AccelmapError
from accelmap.search import pinned_cases, pinned_stall
from accelmap.search.baselines import search_random
from accelmap.workload.constructors import conv2d, gemm

LEVELS = ("L1I", "L1W", "L1O")
CHOICES = (1, 4, 16)


def _base(pes: int = 1):
    """DRAM straight above one PE's three single-class buffers (or a row of ``pes`` PEs): no shared buffer, so every
    word the small buffers cannot keep comes from DRAM again, which is what rule C charges."""
    dram = {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit",
            "read_energy": "50 pJ", "write_energy": "60 pJ", "read_bandwidth": "4 words/cycle"}
    if pes > 1:
        dram["fanout"] = {"axes": [{"name": "X", "size": pes}]}
    lv = [dram] + [{"name": f"L1{c}", "holds": [c], "capacity": "16 words", "width": "8 bit"} for c in "IWO"]
    return accelerator_from_dict({"name": "pe", "compute": {"mac_energy": "1 pJ",
                                                            "precision": {"I": 8, "W": 8, "O": 8}}, "levels": lv})


def test_parts_of_the_bound():
    # A 3x3 convolution: the input's (p + r) index reaches one element from 3 points per spatial index.
    op = conv2d("c", c=2, h=6, w=6, k=2, r=3, s=3)
    assert [_multiplicity(op, X) for X in op.operands] == [1 if X.name != "I" else 9 for X in op.operands]
    # Filling evenly maximises the product: 1 + 3 and 2 + 2 level at 3, capped at 3.5 by the tensor.
    assert _fill_evenly([1.0, 2.0, 5.0], 3.0, [10.0, 10.0, 10.0]) == pytest.approx([3.0, 3.0, 5.0])
    assert _fill_evenly([1.0, 2.0, 5.0], 3.0, [2.5, 10.0, 10.0]) == pytest.approx([2.5, 3.5, 5.0])
    assert pe_levels(_base()) == [1, 2, 3] and pe_levels(_base(2)) == [1, 2, 3]
    # A depthwise-like operator (a dimension in all three operands) gets no bound rather than a wrong one.
    tiny = config_arch(_base(), LEVELS, (1, 1, 1))
    assert capacity_energy_bound(adopt_precision(gemm("g", m=8, n=8, k=8), tiny), tiny).energy_pj > 0
    dw = adopt_precision(conv2d("d", c=4, h=6, w=6, k=4, r=3, s=3, groups=4), tiny)
    assert capacity_energy_bound(dw, tiny).energy_pj == 0


@pytest.fixture(scope="module")
def setup():
    base = _base()
    op = adopt_precision(gemm("g", m=8, n=8, k=8), base)
    configs = list(itertools.product(CHOICES, repeat=3))
    # Candidates that fit the smallest buffers, then more on the largest: the "mapper" below is exact over them.
    cands = []
    for c in ((1, 1, 1), (4, 4, 4), (16, 16, 16)):
        found, _ = search_random(op, config_arch(base, LEVELS, c), "edp", k=25, seed=2, max_samples=200)
        cands += [f.mapping for f in found]
    assert len(cands) > 40
    costs = {}
    for c in configs:
        arch = config_arch(base, LEVELS, c)
        costs[c] = []
        for m in cands:
            try:
                costs[c].append((evaluate(op, arch, m), m))
            except AccelmapError:
                pass
    return base, op, configs, costs


def test_capacity_bound_is_below_every_mapping_on_every_configuration(setup):
    base, op, configs, costs = setup
    checked = 0
    for c in configs:
        arch = config_arch(base, LEVELS, c)
        cb = capacity_energy_bound(op, arch)
        assert cb.energy_pj > op.macs * arch.compute.mac_energy_pj    # it charges traffic
        for r, _ in costs[c]:
            assert r.energy_total >= cb.energy_pj * (1 - 1e-9)
            checked += 1
        assert lower_bound(op, arch, "edp") >= lower_bound(op, arch, "edp", capacity=False)
    assert checked > 300
    # Smaller buffers force more traffic: the bound grows as the buffers shrink.
    small, large = (capacity_energy_bound(op, config_arch(base, LEVELS, c)).transfers for c in ((1, 1, 1), (16,) * 3))
    assert small > 2 * large


def test_co_search_with_rule_c_keeps_the_grid_optimum_and_prunes(setup, monkeypatch):
    base, op, configs, costs = setup
    # Rule B33's cases off (rule H's bound as before them): with them H alone prunes what C pruned here (a
    # one-word buffer refills at every step), and C, the subject, has nothing left to add on this grid.
    monkeypatch.setattr(pinned_cases.PinnedCases, "cases", pinned_stall.PinnedStall.cases)

    def mapper(c, arch):
        ok = costs[c]
        if not ok:
            return None
        r, m = min(ok, key=lambda x: x[0].edp)
        return r.edp, m

    grid = grid_search(op, base, LEVELS, configs, mapper)
    with_c = co_search(op, base, LEVELS, CHOICES, configs, mapper)
    without = co_search(op, base, LEVELS, CHOICES, configs, mapper, capacity_bound=False)
    assert with_c.value == grid.value == without.value
    assert sorted(with_c.mapped + with_c.proven_by_incumbent + with_c.pruned_by_bound) == sorted(configs)
    # Rule C raised the bound of the small configurations and pruned some that H alone would have mapped.
    assert with_c.raised_by_capacity
    assert len(with_c.mapped) < len(without.mapped)
    assert grid.best not in with_c.pruned_by_bound
    for c in with_c.pruned_by_bound:
        assert with_c.lower_bounds[c] >= with_c.value * (1 - 1e-9)
        best_here = mapper(c, None)
        assert best_here is None or best_here[0] >= grid.value


def test_bound_holds_with_a_fan_out_and_a_convolution():
    base = _base(2)
    op = adopt_precision(conv2d("c", c=2, h=5, w=5, k=2, r=3, s=3), base)
    for c in ((1, 1, 1), (4, 16, 1)):
        arch = config_arch(base, LEVELS, c)
        cb = capacity_energy_bound(op, arch)
        found, _ = search_random(op, arch, "energy", k=20, seed=3, max_samples=150)
        assert found
        for f in found:
            assert f.result.energy_total >= cb.energy_pj * (1 - 1e-9)


def test_delivery_across_the_fan_out_is_charged_per_pe_and_stays_below_every_mapping():
    # DRAM multicasts to 4 PEs at 3 pJ per element delivered: a transfer costs at least that, undivided.
    from dataclasses import replace
    base = _base(4)
    fan = replace(base.levels[0].fanout, transfer_energy_pj=3.0)
    arch = replace(base, levels=(replace(base.levels[0], fanout=fan),) + base.levels[1:])
    arch = replace(arch, levels=arch.levels[:1] + tuple(replace(l, capacity_bits=2 * 8) for l in arch.levels[1:]))
    op = adopt_precision(gemm("g", m=8, n=8, k=4), arch)
    cb = capacity_energy_bound(op, arch)
    # A DRAM read (50 pJ; an output's cheaper access is its 50-pJ read too) shared by at most 4 PEs, plus 3 pJ.
    assert cb.per_transfer_pj == pytest.approx(50.0 / 4 + 3.0)
    assert cb.transfers > 0
    found, _ = search_random(op, arch, "energy", k=30, seed=4, max_samples=200)
    assert found
    for f in found:
        assert f.result.energy_total >= cb.energy_pj * (1 - 1e-9)
        # The cost model's network term alone pays for the forced transfers at 3 pJ each.
        noc = sum(e for (lv, _), e in f.result.energy.items() if lv.startswith("NoC:"))
        assert noc >= cb.transfers * 3.0 * (1 - 1e-9)
