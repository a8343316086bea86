"""Rules B46-B48 (docs/mapper.md): over a padded unrolling's Ruby-S tiles, an input (B46) or the output (B47) whose
clipping dims are plain indices, or one window axis over a clipping dim held whole (B48), counts the fixed nest's
refetches at every position, by the least share of a clipped tile (``search/padded_partial_refetches.py``); and rule
B44 reads which dims clip from the nest, not from the unrolling alone. The node bounds must stay below the cost of random Ruby-S mappings with a padded unrolling at every level, the
rules must raise some of them, and the exact search must keep the exhaustive Ruby-S optimum where they cut."""

from __future__ import annotations

import random

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.search.exact import search_exact
from accelmap.search.imperfect_tiles import ceil_div, dim_products, full_positions
from accelmap.search.optimal import bound_any_order
from accelmap.search.padded_partial_refetches import PartialRefetchContext
from accelmap.search.padded_round_positions import RubySBoundContext, clipping_dims, padded_dims
from accelmap.workload import parse_expression
from test_bound_padded_rounds import _padded_mappings, buffer_over_four


def _node(op, m, level):
    fixed = tuple(l for l in m.loops if l.level >= level)
    prod = dim_products(op, fixed)
    return fixed, {d: ceil_div(op.sizes[d], prod[d]) for d in op.dim_names}, full_positions(op, fixed)


def _below(b, res) -> bool:
    return b[0] <= res.energy_total * (1 + 1e-12) and b[1] <= res.latency * (1 + 1e-12)


def test_node_bounds_with_partial_shares_never_exceed_the_cost():
    """At every level of random padded Ruby-S mappings of five presets and a small buffer over a 4-wide fan-out (the
    fixed order, and every order of the node's level by B3/B4), the bound with rules B46 and B47 is at most the
    mapping's energy and latency; it is above rule B44's alone on some nodes, and B47 (the output's share) raises some
    beyond B46."""
    checked = raised = by_output = 0
    for arch, op, m, spatial in _padded_mappings(160, ("tpu_like", "vta_like", "edge_tpu_like", "ascend_like"), seed=3):
        res = evaluate(op, arch, m)
        ctx = PartialRefetchContext(op, arch, m.keep, spatial)
        inputs_only = PartialRefetchContext(op, arch, m.keep, spatial)
        inputs_only.output_shares = False
        b44 = RubySBoundContext(op, arch, m.keep, spatial)
        for level in range(len(arch.levels) + 1):
            fixed, rem, full = _node(op, m, level)
            got = ctx.lower_bound(fixed, level, rem, full_positions=full)
            assert _below(got, res), (arch.name, op, level, m)
            was = b44.lower_bound(fixed, level, rem, full_positions=full)
            raised += got[0] > was[0] * (1 + 1e-9)
            by_output += got[0] > inputs_only.lower_bound(fixed, level, rem, full_positions=full)[0] * (1 + 1e-9)
            if level < len(arch.levels):
                alts = bound_any_order(ctx, fixed, level, rem, frozenset({level}), imperfect="spatial")
                assert any(_below(b, res) for b in alts), (arch.name, op, level, m)
            checked += 1
    assert checked >= 60 and raised >= 10 and by_output >= 5, (checked, raised, by_output)


def test_a_dim_the_unrolling_divides_clips_under_a_register_loop():
    """tpu_like, a 1x3x3x6x4 convolution (S = 2) with K padded as 2 on one axis and P as 2 on the other under a
    register's P2: P = 6 is 2 x 2 x 2 (the last of the two DRAM rounds holds 2 of 4), so P clips although the
    unrolling divides it, and so does the input that uses it. Rule B44 read the padded dims from the unrolling alone,
    counted the input at every position and put the leaf's bound above the mapping's cost (562,553 pJ against
    555,881 with the whole bypass of the first level); reading them from the nest it stays below, at every level and
    for every bypass choice that fits."""
    arch = get_accelerator("tpu_like")
    op = adopt_precision(parse_expression("O[n,k,p,q] += I[n,c,p,q+s] * W[k,c,s]",
                                          {"n": 1, "k": 3, "c": 3, "p": 6, "q": 4, "s": 2}, name="conv"), arch)
    loops = (Loop("p", 2, 0), Loop("k", 2, 0), Loop("c", 3, 0), Loop("s", 2, 0), Loop("p", 2, 1, "Y"),
             Loop("q", 4, 1, "Y"), Loop("k", 2, 1, "X"), Loop("p", 2, 2))
    spatial = {"X": {"k": 2}, "Y": {"p": 2, "q": 4}}
    assert padded_dims(op, spatial) == {"k"}
    unrolled = {"n": {}, "c": {}, "s": {}, "k": {1: 2}, "p": {1: 2}, "q": {1: 4}}
    assert clipping_dims(op, unrolled, loops, 0) == {"k", "p"}
    from accelmap.search.space import Constraints, keep_options
    checked = 0
    for keep in keep_options(op, arch, Constraints()):
        m = Mapping(loops, keep)
        try:
            res = evaluate(op, arch, m)
        except MappingError:
            continue
        for ctx in (RubySBoundContext(op, arch, keep, spatial), PartialRefetchContext(op, arch, keep, spatial)):
            for level in range(len(arch.levels) + 1):
                fixed, rem, full = _node(op, m, level)
                assert _below(ctx.lower_bound(fixed, level, rem, full_positions=full), res), (keep, level)
        checked += 1
    assert checked >= 4


def test_an_open_spatial_loop_clips_unless_it_divides_what_it_is_dealt():
    """A dim whose open fan-out bound divides what the fixed nest leaves does not clip only when that fan-out is the
    next level to fix (an open temporal loop below it could leave a rest: 6 as 2 then 2 leaves 3)."""
    op = parse_expression("O[m,n] += A[m,k] * B[k,n]", {"m": 6, "n": 4, "k": 3}, name="gemm")
    unrolled = {"m": {1: 2}, "n": {}, "k": {}}
    assert clipping_dims(op, unrolled, (), 2) == set()
    assert clipping_dims(op, unrolled, (), 3) == {"m"}
    assert clipping_dims(op, unrolled, (Loop("m", 4, 3),), 3) == {"m"}      # 4 does not divide 6
    assert clipping_dims(op, unrolled, (Loop("m", 2, 2),), 2) == {"m"}      # 2 does not divide the 3 left
    assert clipping_dims(op, unrolled, (Loop("m", 3, 2), Loop("k", 3, 2)), 2) == set()      # 2 divides the 2 left


@pytest.fixture
def without_b56_b57_b59(monkeypatch):
    """Rules B56, B57 and B59 off: they cut nodes of these searches too, and the node counts compare B46-B48 alone."""
    monkeypatch.setattr("accelmap.search.bounds.first_fill_terms", lambda *a, **k: [])
    monkeypatch.setattr("accelmap.search.bounds.first_queue_terms", lambda *a, **k: [])      # (rule B71, off there anyway)
    monkeypatch.setattr("accelmap.search.bounds.last_drain_terms", lambda *a, **k: [])
    monkeypatch.setattr("accelmap.search.bounds.mac_read_groups", lambda *a: None)
    monkeypatch.setattr("accelmap.search.node_bounds.mac_read_groups", lambda *a: None)


def _exact(op, arch, objective, rules: str):
    """The exact search (no heuristic incumbent) with rules B46/B47 ``on``, ``b46`` only, or ``off`` (rule B44 left)."""
    saved = PartialRefetchContext.refetch_volume, PartialRefetchContext.output_shares
    if rules == "off":
        PartialRefetchContext.refetch_volume = RubySBoundContext.refetch_volume      # type: ignore[method-assign]
    elif rules == "b46":
        PartialRefetchContext.output_shares = False
    try:
        return search_exact(op, arch, objective, heuristic=False)
    finally:
        PartialRefetchContext.refetch_volume, PartialRefetchContext.output_shares = saved      # type: ignore[method-assign]


def test_exact_search_keeps_the_exhaustive_optimum_where_the_rules_cut(without_b56_b57_b59):
    """A 7x2x2 GEMM on a 24 B buffer over the 4-wide fan-out (M padded), EDP: the exact search visits 11 nodes with
    rules B46 and B47, 21 with B46 alone and 27 without either, and all three find 52,026, proven, the exhaustive
    Ruby-S optimum (``search_exhaustive(op, arch, "edp", imperfect="spatial")`` gives 52,026 in about 2 s of CPU, so it
    is not run here; a 6x5x2 GEMM, energy, in the same way: 41 / 77 / 107 nodes, all 4,712 pJ, the exhaustive
    optimum)."""
    arch = buffer_over_four("24 B", "32 bit/cycle")
    for sizes, objective, value in (({"m": 7, "n": 2, "k": 2}, "edp", 52026.0),):
        op = adopt_precision(parse_expression("O[m,n] += A[m,k] * B[k,n]", sizes, name="gemm"), arch)
        runs = [_exact(op, arch, objective, rules) for rules in ("on", "b46", "off")]
        assert all(st.extra["proven"] and got[0].value == value for got, st in runs), \
            [(got[0].value, st.extra["proven"]) for got, st in runs]
        nodes = [st.nodes for _, st in runs]
        assert nodes[0] < nodes[1] < nodes[2], nodes


def test_a_window_over_a_clipping_dim_takes_its_share():
    """Rule B48: a 1-D convolution (K = 3, P = 5, R = 2) on a 48 B buffer over the 4-wide fan-out, P as 4 lanes and
    2 buffer rounds (8 of 5 in the buffer's tile: one position along P), K then R at DRAM. The input's window p + r
    moves one element at each of R's 3 steps and K's 2 wraps: 5 refetched elements clipped (13 unclipped, less the
    first tile of 8). B48 counts the share 5/8 of them at the leaf (I2 counted none), and the bound stays below the
    mapping's cost; B48 off, the leaf's input refetches are 0."""
    arch = buffer_over_four("48 B")
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", {"k": 3, "p": 5, "r": 2}, name="conv1d"), arch)
    loops = (Loop("k", 3, 0), Loop("r", 2, 0), Loop("p", 2, 1), Loop("p", 4, 1, "X"))
    keep = (frozenset({"I", "W", "O"}),) * 2
    res = evaluate(op, arch, Mapping(loops, keep))
    on = PartialRefetchContext(op, arch, keep, {"X": {"p": 4}})
    off = PartialRefetchContext(op, arch, keep, {"X": {"p": 4}})
    off.window_shares = False
    I = op.operand("I")
    on.lower_bound(loops, 0, dict.fromkeys(op.dim_names, 1), full_positions=0)
    assert on.refetch_volume(I, 1, 0, 1, 13, 1, 5) == 13 * 0 + 5 / 8 * 5
    off.lower_bound(loops, 0, dict.fromkeys(op.dim_names, 1), full_positions=0)
    assert off.refetch_volume(I, 1, 0, 1, 13, 1, 5) == 0
    got = on.lower_bound(loops, 0, dict.fromkeys(op.dim_names, 1), full_positions=0)
    was = off.lower_bound(loops, 0, dict.fromkeys(op.dim_names, 1), full_positions=0)
    assert _below(got, res) and got[0] > was[0], (got, was, res.energy_total)


def test_exact_search_keeps_the_exhaustive_optimum_where_the_window_share_cuts(without_b56_b57_b59):
    """The same convolution, energy: the exact search (no heuristic incumbent) visits 27 nodes with rule B48 and 31
    without, both 2,270 pJ, proven, the exhaustive Ruby-S optimum (``search_exhaustive(op, arch, "energy",
    imperfect="spatial")``: 2,270 pJ, run once, not here)."""
    arch = buffer_over_four("48 B")
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", {"k": 3, "p": 5, "r": 2}, name="conv1d"), arch)
    got, st = search_exact(op, arch, "energy", heuristic=False)
    PartialRefetchContext.window_shares = False
    try:
        off, st_off = search_exact(op, arch, "energy", heuristic=False)
    finally:
        PartialRefetchContext.window_shares = True
    assert st.extra["proven"] and st_off.extra["proven"]
    assert got[0].value == off[0].value == 2270.0
    assert st.nodes < st_off.nodes, (st.nodes, st_off.nodes)


def test_window_shares_never_exceed_the_cost_over_every_dram_order():
    """Rule B48 over random Ruby-S mappings of 1-D convolutions (stride 1 or 2, P padded on the 4-wide fan-out of a
    32-64 B buffer), every order of the DRAM loops and every bypass choice that fits: at every level the bound is at
    most the mapping's energy and latency, and above the bound without B48 on some nodes."""
    import itertools

    from accelmap.search.space import Constraints, keep_options
    rng = random.Random(2)
    checked = raised = 0
    for _ in range(25):
        arch = buffer_over_four(rng.choice(["32 B", "48 B", "64 B"]))
        stride = rng.choice(["", "2*"])
        sizes = {"k": rng.randint(2, 5), "p": rng.randint(3, 9), "r": rng.randint(1, 3)}
        op = adopt_precision(parse_expression(f"O[k,p] += I[{stride}p+r] * W[k,r]", sizes, name="conv1d"), arch)
        u = rng.randint(2, 4)
        if op.sizes["p"] % u == 0 or u > op.sizes["p"]:
            continue
        rounds = ceil_div(op.sizes["p"], u)
        t = {d: rng.choice([b for b in range(1, n + 1) if n % b == 0])
             for d, n in (("p", rounds), ("k", op.sizes["k"]), ("r", op.sizes["r"]))}
        buf = [Loop(d, b, 1) for d, b in t.items() if b > 1]
        rng.shuffle(buf)
        dram = [Loop(d, b, 0) for d, b in (("p", rounds // t["p"]), ("k", op.sizes["k"] // t["k"]),
                                           ("r", op.sizes["r"] // t["r"])) if b > 1]
        for order in itertools.permutations(dram):
            loops = tuple(order) + tuple(buf) + (Loop("p", u, 1, "X"),)
            for keep in keep_options(op, arch, Constraints()):
                try:
                    res = evaluate(op, arch, Mapping(loops, keep))
                except MappingError:
                    continue
                on = PartialRefetchContext(op, arch, keep, {"X": {"p": u}})
                off = PartialRefetchContext(op, arch, keep, {"X": {"p": u}})
                off.window_shares = False
                m = Mapping(loops, keep)
                for level in range(3):
                    fixed, rem, full = _node(op, m, level)
                    got = on.lower_bound(fixed, level, rem, full_positions=full)
                    assert _below(got, res), (op, loops, keep, level)
                    was = off.lower_bound(fixed, level, rem, full_positions=full)
                    raised += got[0] > was[0] * (1 + 1e-9) or got[1] > was[1] * (1 + 1e-9)
                    checked += 1
    assert checked >= 300 and raised >= 2, (checked, raised)
