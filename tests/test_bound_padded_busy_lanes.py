"""Rules B49 and B50 (docs/mapper.md): below a padded fan-out, the instances that are never idle refetch as the
unclipped nest (``search/padded_busy_lanes.py``). The node bounds must stay below the cost of random padded Ruby-S
mappings at every level (the fixed order and every order of the node's level), the rules must raise some of them, and
the exact search must keep the exhaustive Ruby-S optimum where they cut."""

from __future__ import annotations

import itertools
import math
import random

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.schema import accelerator_from_dict
from accelmap.cost.model import evaluate
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.search.exact import search_exact
from accelmap.search.imperfect_tiles import ceil_div
from accelmap.search.optimal import bound_any_order
from accelmap.search.padded_busy_lanes import BusyLaneContext
from accelmap.search.padded_partial_refetches import PartialRefetchContext
from accelmap.search.padded_round_positions import padded_dims
from accelmap.workload import parse_expression
from test_bound_padded_partial import _below, _node
from test_bound_padded_rounds import padded_ruby_s_mappings

# The exhaustive Ruby-S optimum of the exact-search case below (``search_exhaustive``, run once).
EXHAUSTIVE_CONV = 850.0


def pes_under_four(capacity: str = "16 B", port: str = "16 bit/cycle"):
    """DRAM over a buffer whose 4-wide multicast fan-out feeds four PE registers (simba_like's shape in small: a
    level below the fan-out)."""
    return accelerator_from_dict({"name": "pe4", "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "16 bit",
         "read_energy": "50 pJ", "write_energy": "50 pJ", "read_bandwidth": port, "write_bandwidth": port},
        {"name": "Buf", "holds": ["I", "W", "O"], "capacity": "256 B", "width": "16 bit",
         "read_energy": "4 pJ", "write_energy": "4 pJ", "read_bandwidth": port, "write_bandwidth": port,
         "fanout": {"axes": [{"name": "X", "size": 4, "multicast": True, "reduce": True}],
                    "transfer_energy": "1 pJ"}},
        {"name": "Reg", "holds": ["I", "W", "O"], "capacity": capacity, "width": "16 bit",
         "read_energy": "1 pJ", "write_energy": "1 pJ"}],
        "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 16}}})


def _check_every_level(arch, op, m, spatial, every_order: bool) -> tuple[int, int, int]:
    """Bound <= cost at every level of one mapping (with ``every_order``, also for some order of the node's level by
    B3/B4); (levels checked, levels whose energy bound rules B49/B50 raised, levels whose energy or latency bound)."""
    res = evaluate(op, arch, m)
    ctx = BusyLaneContext(op, arch, m.keep, spatial)
    was_ctx = PartialRefetchContext(op, arch, m.keep, spatial)
    checked = raised_energy = raised_any = 0
    for level in range(len(arch.levels) + 1):
        fixed, rem, full = _node(op, m, level)
        got = ctx.lower_bound(fixed, level, rem, full_positions=full)
        assert _below(got, res), (arch.name, op, level, m)
        was = was_ctx.lower_bound(fixed, level, rem, full_positions=full)
        energy_up = got[0] > was[0] * (1 + 1e-9)
        raised_energy += energy_up
        raised_any += energy_up or got[1] > was[1] * (1 + 1e-9)
        if every_order and level < len(arch.levels):
            alts = bound_any_order(ctx, fixed, level, rem, frozenset({level}), imperfect="spatial")
            assert any(_below(b, res) for b in alts), (arch.name, op, level, m)
        checked += 1
    return checked, raised_energy, raised_any


def test_node_bounds_with_busy_lanes_never_exceed_the_cost():
    """At every level of random padded Ruby-S mappings of simba_like and eyeriss_like (the fixed order, and every
    order of the node's level by B3/B4), the bound with rules B49 and B50 is at most the mapping's energy and latency,
    and above rules B44/B46-B48's on some nodes."""
    checked = raised = 0
    archs = [get_accelerator(n) for n in ("simba_like", "eyeriss_like")]
    for arch, op, m, spatial in padded_ruby_s_mappings(200, archs, seed=5):
        levels, _, raised_any = _check_every_level(arch, op, m, spatial, every_order=True)
        checked += levels
        raised += raised_any
    assert checked >= 60 and raised >= 10, (checked, raised)


def test_busy_lanes_on_a_small_pe_array_never_exceed_the_cost():
    """The same on random padded Ruby-S mappings of a buffer over four PE registers, every register size."""
    checked = raised = 0
    rng = random.Random(0)
    for capacity in ("8 B", "32 B"):
        for arch, op, m, spatial in padded_ruby_s_mappings(200, [pes_under_four(capacity)], seed=rng.randint(0, 10**6)):
            levels, raised_energy, _ = _check_every_level(arch, op, m, spatial, every_order=False)
            checked += levels
            raised += raised_energy
    assert checked >= 60 and raised >= 5, (checked, raised)


def test_an_idle_lane_is_left_out_and_a_whole_window_counts():
    """A 1-D convolution (K = 2, P = 7, R = 3) on the small PE array, P as 4 lanes and 2 DRAM rounds, K at DRAM outside
    P: the lane holding P = 7 idles in the second round, so 3 of the 4 registers are busy, and their input windows
    (p + r, P extent 1 in the register) are never clipped. Each register's unclipped input count is 2 x 2 x 3 = 12
    elements (its first tile of 3 and a new window at each of the 3 other steps), 9 beyond the first tile: rule B49
    counts 3/4 x 4 x 9 = 27 at the leaf (rules B46-B48: none, the window spans the clipping dim below the fan-out),
    and the bound stays below the cost."""
    arch = pes_under_four("16 B")
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", {"k": 2, "p": 7, "r": 3}, name="conv1d"), arch)
    loops = (Loop("k", 2, 0), Loop("p", 2, 0), Loop("p", 4, 1, "X"), Loop("r", 3, 2))
    keep = (frozenset({"I", "W", "O"}),) * 3
    spatial = {"X": {"p": 4}}
    res = evaluate(op, arch, Mapping(loops, keep))
    ctx = BusyLaneContext(op, arch, keep, spatial)
    ones = dict.fromkeys(op.dim_names, 1)
    got = ctx.lower_bound(loops, 0, ones, full_positions=0)
    assert ctx.lanes(2, frozenset({"p"})) == (0.75, {"p": 1})
    I = op.operand("I")
    assert ctx.refetch_volume(I, 2, 0, 1, 48, 4, 3) == 0.75 * (48 - 12)
    was = PartialRefetchContext(op, arch, keep, spatial).lower_bound(loops, 0, ones, full_positions=0)
    assert _below(got, res) and got[0] > was[0], (got, was, res.energy_total)


def _exact(op, arch, objective, lanes: bool = True, orders: bool = True):
    """The exact search (no heuristic incumbent) with rules B49/B50 (``lanes``; and rule B62, which counts the same
    never-clipped lanes where they apply) and B51 (``orders``) on or off."""
    import accelmap.search.optimal as optimal
    import accelmap.search.padded_interior_lanes as interior_lanes

    saved = BusyLaneContext.lanes, optimal.orders_prunable, interior_lanes.interior_share
    if not lanes:
        BusyLaneContext.lanes = lambda self, c, clips: None      # type: ignore[method-assign]
        interior_lanes.interior_share = lambda *args: 0.0
    if not orders:
        optimal.orders_prunable = lambda *args: False
    try:
        return search_exact(op, arch, objective, heuristic=False)
    finally:
        BusyLaneContext.lanes, optimal.orders_prunable, interior_lanes.interior_share = saved      # type: ignore[method-assign]


def test_exact_search_keeps_the_exhaustive_optimum_where_the_rules_cut():
    """A 1-D convolution (K = 2, P = 5, R = 2) on the small PE array with 12 B registers, energy (found by a sweep of
    small cases where the rules cut): the exact search (no heuristic incumbent) visits 45 nodes with rules B49/B50 and 52
    without, and finds the same optimum with and without them and with rule B51 off, proven: 850 pJ, the exhaustive
    Ruby-S optimum (every unrolling, ``search_exhaustive(op, arch, "energy", imperfect="spatial")``, run once: minutes of
    CPU, too slow for the suite)."""
    arch = pes_under_four("12 B")
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", {"k": 2, "p": 5, "r": 2}, name="conv1d"), arch)
    runs = [_exact(op, arch, "energy", lanes, orders) for lanes, orders in ((True, True), (False, True), (True, False))]
    assert all(st.extra["proven"] and got[0].value == EXHAUSTIVE_CONV for got, st in runs), \
        [(got[0].value, st.extra["proven"], st.nodes) for got, st in runs]
    nodes = [st.nodes for _, st in runs]
    assert nodes[0] < nodes[1], nodes


def _orders_checked(cases) -> tuple[int, int]:
    """For each (arch, op, m, spatial) and each level whose orders rule B51 lets rules O1-O3 prune: every permutation
    of the level's temporal loops (the rest of the mapping as drawn) costs at least some kept order's energy and
    latency at once. Returns (levels checked, levels where an order was dropped)."""
    from accelmap.search.orders import order_candidates, order_costs, refill_levels
    from accelmap.search.padded_orders import orders_prunable

    checked = dropped = 0
    for arch, op, m, spatial in cases:
        nlev = len(arch.levels)
        ctx = BusyLaneContext(op, arch, m.keep, spatial)
        for level in range(nlev - 1):
            t_loops = tuple(l for l in m.loops if l.level == level and not l.spatial and l.bound > 1)
            rest = tuple(l for l in m.loops if l.level > level or (l.level == level and l.spatial))
            if len(t_loops) < 2 or not orders_prunable(ctx, m.keep, t_loops + rest, level):
                continue
            outer = tuple(l for l in m.loops if l.level < level)
            kept = order_candidates(op, m.keep, level, t_loops, rest, nlev, None, (), order_costs(arch),
                                    refill_levels(arch))
            costs = {}
            for p in itertools.permutations(t_loops):
                r = evaluate(op, arch, Mapping(outer + p + rest, m.keep), check=False)
                costs[p] = (r.energy_total, r.latency)
            kept_costs = [costs[tuple(p)] for p in kept]
            for p, (e, lat) in costs.items():
                assert any(ke <= e * (1 + 1e-12) and kl <= lat * (1 + 1e-12) for ke, kl in kept_costs), \
                    (arch.name, op, level, m, p, kept)
            checked += 1
            dropped += len(kept) < len(costs)
    return checked, dropped


def _padded_nests(draws: int, seed: int):
    """Ruby-S mappings of small batched GEMMs and 1-D convolutions on the small PE array: one output dim padded on its 4 lanes,
    every dim's temporal loops spread over DRAM, the buffer and the registers (each dividing what is left), random
    orders, every level keeping every operand."""
    rng = random.Random(seed)
    arch = pes_under_four("64 B")
    for _ in range(draws):
        if rng.random() < 0.6:
            sizes = {"b": rng.choice([2, 3]), "m": rng.randint(3, 7), "n": rng.choice([2, 4]), "k": rng.choice([2, 3])}
            op = parse_expression("O[b,m,n] += A[b,m,k] * B[b,k,n]", sizes, name="bgemm")
        else:
            sizes = {"k": rng.randint(1, 4), "p": rng.randint(3, 7), "r": rng.randint(1, 3)}
            op = parse_expression("O[k,p] += I[p+r] * W[k,r]", sizes, name="conv1d")
        op = adopt_precision(op, arch)
        padded = rng.choice([d for d in op.output.dims if op.sizes[d] > 2])
        u = rng.randint(2, min(4, op.sizes[padded]))
        levels: list[list[Loop]] = [[], [], []]
        for d, n in op.sizes.items():
            inner = rng.choice([b for b in range(1, n + 1) if n % b == 0]) if d != padded else 1
            left = n // inner if d != padded else ceil_div(n, u)
            mid = rng.choice([b for b in range(1, left + 1) if left % b == 0])
            if d == padded and rng.random() < 0.7:
                mid = 1         # the rounds at DRAM: rule B51 applies to the buffer's orders
            elif d != padded and rng.random() < 0.5:
                mid = left      # several loops at the buffer
            for lv, b in ((2, inner), (1, mid), (0, left // mid)):
                if b > 1:
                    levels[lv].append(Loop(d, b, lv))
        for ls in levels:
            rng.shuffle(ls)
        loops = tuple(levels[0] + levels[1] + [Loop(padded, u, 1, "X")] + levels[2])
        spatial = {"X": {padded: u}}
        if not padded_dims(op, spatial) or math.prod(l.bound for l in loops if l.dim == padded) < op.sizes[padded]:
            continue
        yield arch, op, Mapping(loops, (frozenset({"I", "W", "O", "A", "B"} & {x.name for x in op.operands}),) * 3), \
            spatial


def test_pruned_orders_of_padded_nests_keep_an_order_at_least_as_good():
    """Rule B51 on Ruby-S mappings of the small PE array with a padded lane dim (``_padded_nests``) and on random padded
    Ruby-S mappings of simba_like and eyeriss_like: at every level where it applies, each order of the level's
    temporal loops costs at least one kept order's energy and latency at once."""
    checked, dropped = _orders_checked(_padded_nests(300, seed=4))
    archs = [get_accelerator(n) for n in ("simba_like", "eyeriss_like")]
    more, _ = _orders_checked(padded_ruby_s_mappings(300, archs, seed=9))
    assert checked >= 15 and dropped >= 8, (checked, dropped, more)
