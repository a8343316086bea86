"""Sunstone-arch's memory-configuration co-search: the grid's answer, its rules checked one by one."""

import itertools

import pytest

from accelmap.arch import accelerator_from_dict
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.dse import components
from accelmap.dse.memory_search import (buffer_area_um2, co_search, config_arch, configs_within, grid_search,
                                        lower_bound, smallest_config)
from accelmap.errors import AccelmapError
from accelmap.search.baselines import search_random
from accelmap.workload.constructors import conv2d

LEVELS = ("L1I", "L1W", "L1O")
CHOICES = (8, 16, 32)


def _base():
    lv = [{"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "16 bit",
           "read_bandwidth": "4 words/cycle"},
          {"name": "L2", "holds": ["I", "W", "O"], "capacity": "4 KiB", "width": "16 bit",
           "read_bandwidth": "16 words/cycle", "fanout": {"axes": [{"name": "X", "size": 2}, {"name": "Y", "size": 2}]}}]
    lv += [{"name": f"L1{c}", "holds": [c], "capacity": "32 words", "width": "16 bit"} for c in "IWO"]
    return accelerator_from_dict({"name": "split", "compute": {"mac_energy": "1 pJ",
                                                               "precision": {"I": 16, "W": 16, "O": 16}},
                                  "levels": lv})


@pytest.fixture(scope="module")
def setup():
    base = _base()
    op = adopt_precision(conv2d("c", c=2, h=4, w=4, k=4, r=3, s=3, padding=1), base)
    largest = config_arch(base, LEVELS, (32, 32, 32))
    # A fixed candidate list (seeded sampling on the largest buffers): the "mapper" below is exact over it,
    # so the grid and the co-search can be compared without depending on the machine's speed.
    found, _ = search_random(op, largest, "edp", k=40, seed=1, max_samples=120)
    cands = [f.mapping for f in found]
    assert len(cands) > 20
    memo = {}

    def mapper(c, arch):
        if c in memo:
            return memo[c]
        best = None
        for m in cands:
            try:
                v = evaluate(op, arch, m).edp
            except AccelmapError:
                continue
            if best is None or v < best[0]:
                best = (v, m)
        memo[c] = best
        return best

    return base, op, mapper, cands


def test_budget_rule_keeps_exactly_the_configs_that_fit():
    base = _base()
    cap = components.sram(32 * 16, 16)[2] * 1.5
    got = configs_within(base, LEVELS, CHOICES, cap)
    brute = [c for c in itertools.product(CHOICES, repeat=3)
             if sum(components.sram(w * 16, 16)[2] for w in c) <= cap]
    assert got == brute and 0 < len(got) < 27
    assert all(buffer_area_um2(base, LEVELS, c) <= cap for c in got)


def test_buffer_energies_follow_their_sizes():
    a = config_arch(_base(), LEVELS, (8, 16, 32))
    for name, w in zip(LEVELS, (8, 16, 32), strict=True):
        assert a.level(name).capacity_bits == w * 16
        assert a.level(name).read_energy_pj == pytest.approx(components.sram(w * 16, 16)[0])


def test_smallest_config_holds_the_tiles_and_one_size_less_does_not(setup):
    base, op, _, cands = setup
    largest = config_arch(base, LEVELS, (32, 32, 32))
    for m in cands[:20]:
        s = smallest_config(op, largest, m, LEVELS, CHOICES)
        assert s is not None
        evaluate(op, config_arch(base, LEVELS, s), m)            # valid there
        for k in range(3):
            if s[k] == CHOICES[0]:
                continue
            smaller = s[:k] + (CHOICES[CHOICES.index(s[k]) - 1],) + s[k + 1:]
            with pytest.raises(AccelmapError):
                evaluate(op, config_arch(base, LEVELS, smaller), m)


def test_co_search_finds_the_grid_optimum_and_its_prunes_are_sound(setup):
    base, op, mapper, _ = setup
    configs = list(itertools.product(CHOICES, repeat=3))
    grid = grid_search(op, base, LEVELS, configs, mapper)
    co = co_search(op, base, LEVELS, CHOICES, configs, mapper)
    assert co.value == grid.value
    assert grid.best is not None and co.best is not None
    # Every configuration is mapped, proven by an incumbent, or pruned by its bound; none twice.
    assert sorted(co.mapped + co.proven_by_incumbent + co.pruned_by_bound) == sorted(configs)
    for c in co.pruned_by_bound:
        assert co.lower_bounds[c] >= co.value * (1 - 1e-9)
    # A bound holds for every mapping of its configuration: the grid's value there is never below it.
    for c in configs:
        v = mapper(c, config_arch(base, LEVELS, c))
        if v is not None:
            assert v[0] >= co.lower_bounds[c] * (1 - 1e-9)
    # Observation 6: a dominated configuration's best mapping fits a smaller one, where it costs less.
    for c in co.dominated:
        v, m = mapper(c, config_arch(base, LEVELS, c))
        s = smallest_config(op, config_arch(base, LEVELS, c), m, LEVELS, CHOICES)
        assert s != c and all(a <= b for a, b in zip(s, c, strict=True))
        assert evaluate(op, config_arch(base, LEVELS, s), m).edp < v
    assert co.dominated


def test_lower_bound_grows_with_buffer_energy():
    base = _base()
    op = adopt_precision(conv2d("c", c=2, h=4, w=4, k=4, r=3, s=3, padding=1), base)
    small = lower_bound(op, config_arch(base, LEVELS, (8, 8, 8)), "energy")
    big = lower_bound(op, config_arch(base, LEVELS, (32, 32, 32)), "energy")
    assert 0 < small < big
