"""Sunstone-arch's memory-configuration co-search: the grid's answer, its rules checked one by one."""

import itertools

import pytest

from accelmap.arch import accelerator_from_dict
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.dse import components
from accelmap.dse.memory_search import (
    buffer_area_um2,
    co_search,
    config_arch,
    configs_within,
    grid_search,
    lower_bound,
    smallest_config,
    split_l1_base,
)
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


def cheapest(op, arch, mappings):
    """(EDP, mapping) of the cheapest of ``mappings`` valid on ``arch``, or None: a mapper exact over that list."""
    best = None
    for m in mappings:
        try:
            v = evaluate(op, arch, m).edp
        except AccelmapError:
            continue
        if best is None or v < best[0]:
            best = (v, m)
    return best


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
        if c not in memo:
            memo[c] = cheapest(op, arch, cands)
        return memo[c]

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


# The thesis' Fig. 5.2 (Ng, UBC 2022, Sec. 5.2.1): the 1-D convolution of its Fig. 4.3 (P = 14, K = 4,
# C = 4, R = 3) with an L1 of 3, 4 or 8 entries. Written as a conv2d with one row (Q plays P, S plays R).
FIG_OP = conv2d("fig4_3", c=4, h=1, w=16, k=4, r=1, s=3)
FIG_DIMS = ("K", "Q", "C", "S")          # the figure's tile order (K, P, C, R)
FIG_BOUNDS = tuple(dict(FIG_OP.dims)[d] for d in FIG_DIMS)


def _fig_footprint(tile):
    from accelmap.workload.index_sets import tile_size
    ext = {d: 1 for d, _ in FIG_OP.dims} | dict(zip(FIG_DIMS, tile, strict=True))
    return sum(tile_size(o, ext) for o in FIG_OP.operands)


def test_fig_5_2_footprints_are_the_figures():
    assert FIG_BOUNDS == (4, 14, 4, 3)
    fig = {(1, 1, 1, 1): 3, (2, 1, 1, 1): 5, (1, 2, 1, 1): 5, (1, 1, 2, 1): 5, (1, 1, 1, 3): 7,
           (2, 2, 1, 1): 8, (2, 1, 2, 1): 8, (1, 2, 2, 1): 8, (2, 1, 1, 3): 11, (1, 2, 1, 3): 9, (4, 1, 1, 1): 9,
           (1, 1, 2, 3): 13, (1, 7, 1, 1): 15, (2, 2, 2, 1): 12, (4, 2, 1, 1): 14, (2, 7, 1, 1): 23,
           (1, 2, 2, 3): 16, (1, 7, 2, 1): 23, (4, 1, 2, 1): 14, (2, 1, 4, 1): 14, (2, 1, 2, 3): 20}
    assert {t: _fig_footprint(t) for t in fig} == fig


def test_fig_5_2_sunstone_arch_prunes_every_4_entry_design_point():
    from accelmap.dse.memory_search import tile_tree_with_memory
    kept, visited = tile_tree_with_memory(FIG_BOUNDS, _fig_footprint, (3, 4, 8))
    # The figure: root kept with 3 entries; (1,1,1,3) and the three footprint-8 tiles kept with 8; the
    # root's other children pruned by a larger factor; no design point with a 4-entry L1.
    assert sorted(kept) == sorted([((1, 1, 1, 1), 3), ((1, 1, 1, 3), 8), ((2, 2, 1, 1), 8),
                                   ((2, 1, 2, 1), 8), ((1, 2, 2, 1), 8)])
    assert len(visited) == 8 and all(m != 4 for _, m in kept)
    # Brute force over every tile: a (tile, smallest memory) pair is kept iff no one-step enlargement
    # fits that same memory (Fig. 5.1: a 4-entry L1 holds exactly the tiles a 3-entry one does).
    def divisors(n):
        return [d for d in range(1, n + 1) if n % d == 0]

    def smallest(t):
        return next((m for m in (3, 4, 8) if _fig_footprint(t) <= m), None)

    brute = []
    for t in itertools.product(*(divisors(n) for n in FIG_BOUNDS)):
        m = smallest(t)
        if m is None:
            continue
        kids = [t[:d] + (min(x for x in divisors(n) if x > t[d]),) + t[d + 1:]
                for d, n in enumerate(FIG_BOUNDS) if t[d] < n]
        if all(smallest(k) != m for k in kids):
            brute.append((t, m))
    assert sorted(brute) == sorted(kept)
    fits = {m: {t for t in itertools.product(*(divisors(n) for n in FIG_BOUNDS)) if _fig_footprint(t) <= m}
            for m in (3, 4)}
    assert fits[3] == fits[4] == {(1, 1, 1, 1)}


# Rule T (the thesis' Observation 4 at the configuration level): opt-in, not certified.

def _tile_brute_force(op, base, choices, allowed):
    """Every tile of the divisor lattice: its smallest memory, kept iff no one-step larger tile has it."""
    from accelmap.workload.index_sets import tile_size
    dims = list(op.dim_names)
    divs = [[d for d in range(1, op.sizes[n] + 1) if op.sizes[n] % d == 0] for n in dims]

    def mem(t):
        ext = dict(zip(dims, t, strict=True))
        out = []
        for name in LEVELS:
            lv = base.level(name)
            bits = sum(tile_size(o, ext) * o.bits for o in op.operands if o.cls in lv.holds)
            fit = [w for w in sorted(choices) if w * lv.width_bits >= bits]
            if not fit:
                return None
            out.append(fit[0])
        return tuple(out) if tuple(out) in allowed else None

    kept = set()
    for t in itertools.product(*divs):
        m = mem(t)
        if m is None:
            continue
        children = [t[:i] + (next(d for d in divs[i] if d > t[i]),) + t[i + 1:]
                    for i in range(len(t)) if t[i] < divs[i][-1]]
        if all(mem(ch) != m for ch in children):
            kept.add(m)
    return kept


def test_tile_dominance_keeps_what_a_brute_force_over_every_tile_keeps():
    from accelmap.dse.memory_search import per_level, promising_configs
    base = _base()
    op = adopt_precision(conv2d("c", c=2, h=4, w=4, k=4, r=3, s=3, padding=1), base)
    allowed = set(itertools.product(CHOICES, repeat=3))
    got = promising_configs(op, base, LEVELS, per_level(CHOICES, 3), allowed)
    assert got == _tile_brute_force(op, base, CHOICES, allowed)
    assert 0 < len(got) < len(allowed)


def test_tile_dominance_is_opt_in_and_reports_what_it_dropped(setup):
    from accelmap.dse.memory_search import per_level, promising_configs
    base, op, mapper, _ = setup
    configs = list(itertools.product(CHOICES, repeat=3))
    co = co_search(op, base, LEVELS, CHOICES, configs, mapper, tile_dominance=True)
    keep = promising_configs(op, base, LEVELS, per_level(CHOICES, 3), set(configs))
    assert co.pruned_by_tiles == [c for c in configs if c not in keep] and co.pruned_by_tiles
    assert not set(co.pruned_by_tiles) & set(co.mapped + co.proven_by_incumbent + co.pruned_by_bound)
    assert sorted(co.pruned_by_tiles + co.mapped + co.proven_by_incumbent + co.pruned_by_bound) == sorted(configs)
    # Measured, not guaranteed (the rule is a heuristic): on this space it keeps the grid's optimum.
    assert co.value == min(v[0] for c in configs if (v := mapper(c, config_arch(base, LEVELS, c))) is not None)


@pytest.mark.parametrize("hw, ck, pruned", [(56, 64, 0), (28, 128, 0), (14, 256, 0), (7, 512, 16)])
def test_tile_dominance_on_table_7_1_prunes_like_the_thesis(hw, ck, pruned):
    # Ng's thesis, Ch. 7: "up to 30% pruned for conv4", "few to no configurations" for conv1-conv3.
    from accelmap.dse.memory_search import per_level, promising_configs
    base = split_l1_base()
    choices = (8, 16, 32, 64, 128)
    configs = configs_within(base, LEVELS, choices, components.sram(128 * 16, 16)[2])
    assert len(configs) == 51
    op = adopt_precision(conv2d("c", c=ck, h=hw, w=hw, k=ck, r=3, s=3, padding=1), base)
    keep = promising_configs(op, base, LEVELS, per_level(choices, 3), set(configs))
    assert keep <= set(configs) and len(configs) - len(keep) == pruned
