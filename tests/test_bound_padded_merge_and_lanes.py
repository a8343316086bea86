"""Rules B60-B62 (docs/mapper.md) over padded Ruby-S mappings: a merge over a padded dim counts no more lanes than the
dim has indices (B60, ``merge_ceiling``); where no position of the fixed nest is whole, each instance's first tile is
clipped (B61, ``clipped_first_tiles``); below a padded fan-out, the instances never clipped refetch as the unclipped
nest whatever index reads the clipping dim (B62, ``padded_interior_lanes``). The node bounds must stay below the cost
at every level, the rules must raise them, and the exact search must keep its optimum where they cut."""

from __future__ import annotations

import math
import random

import pytest

import accelmap.search.bounds as bounds_module
import accelmap.search.node_bounds as node_bounds_module
from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.search.bounds import BoundContext
from accelmap.search.imperfect_tiles import ImperfectBoundContext
from accelmap.search.padded_busy_lanes import BusyLaneContext
from accelmap.search.padded_interior_lanes import InteriorLaneContext
from accelmap.workload import parse_expression
from accelmap.workload.models import load_model
from test_bound_padded_busy_lanes import pes_under_four
from test_bound_padded_partial import _below, _node
from test_bound_padded_rounds import padded_ruby_s_mappings

SIMBA_KEEP = (frozenset({"I", "W", "O"}), frozenset(), frozenset({"I"}), frozenset(), frozenset({"O"}))
# ResNet-18 layer4.0.conv2 on simba_like, the padded unrolling PX:P4 PY:Q4 VK:K2,P2,Q2 VC:C8 (P = Q = 7 over 8 lanes):
# the exact search's best mapping, and a leaf of the same subtree with the input refetched at every K step.
SIMBA_BEST = (("K", 256, 0, None), ("P", 4, 1, "PX"), ("Q", 4, 1, "PY"), ("C", 64, 2, None), ("R", 3, 2, None),
              ("S", 3, 2, None), ("K", 2, 4, "VK"), ("P", 2, 4, "VK"), ("Q", 2, 4, "VK"), ("C", 8, 4, "VC"))
SIMBA_LEAF = (("C", 2, 0, None), ("K", 256, 1, None), ("C", 2, 1, None), ("S", 3, 1, None), ("R", 3, 1, None),
              ("P", 4, 1, "PX"), ("Q", 4, 1, "PY"), ("C", 16, 2, None), ("K", 2, 4, "VK"), ("P", 2, 4, "VK"),
              ("Q", 2, 4, "VK"), ("C", 8, 4, "VC"))
SIMBA_SPATIAL = {"PX": {"P": 4}, "PY": {"Q": 4}, "VK": {"K": 2, "P": 2, "Q": 2}, "VC": {"C": 8}}


@pytest.fixture
def rules_off(monkeypatch):
    """Switch rules off by name: "B60" (the merge's cap by the open fan-outs; the fixed loops' cap stays), "B61",
    "B57" (a padded round's multicast reads, which counts the same weight reads as B60 where the MACs read from DRAM)."""
    def off(*names: str):
        if "B57" in names:
            monkeypatch.setattr(bounds_module, "mac_read_groups", lambda *args: None)
            monkeypatch.setattr(node_bounds_module, "mac_read_groups", lambda *args: None)
        if "B60" in names:
            monkeypatch.setattr(bounds_module, "merge_room", lambda *args: math.inf)
            monkeypatch.setattr(node_bounds_module, "merge_room", lambda *args: math.inf)
        if "B61" in names:
            monkeypatch.setattr(ImperfectBoundContext, "first_tiles", BoundContext.first_tiles)
    return off


def _simba_layer():
    arch = get_accelerator("simba_like")
    layer = {x.name: x for x in load_model("resnet18").layers}["layer4.0.conv2"]
    return arch, adopt_precision(layer.operator, arch)


def _fractions(ctx_class, op, arch, loops) -> list[tuple[float, float]]:
    """(energy, latency) bound over cost at every level, the root first."""
    m = Mapping(tuple(Loop(*x) for x in loops), SIMBA_KEEP)
    res = evaluate(op, arch, m)
    ctx = ctx_class(op, arch, SIMBA_KEEP, SIMBA_SPATIAL)
    out = []
    for level in range(len(arch.levels), -1, -1):
        fixed, rem, full = _node(op, m, level)
        e, l = ctx.lower_bound(fixed, level, rem, full_positions=full)
        out.append((e / res.energy_total, l / res.latency))
    return out


def test_the_open_fan_outs_merge_no_more_than_the_padded_dims_hold(rules_off):
    """The weights are read from DRAM by the MACs, multicast over P and Q; the unrolling spans 8 x 8 lanes over P = Q = 7,
    so at most 49 lanes share a weight: every weight is read once (2,359,296 reads, as the model counts). While PX and
    PY are open (levels 4 to 2), rule B60 caps their merge with VK's P2 and Q2 at 7 x 7: the bound stays at the root's,
    0.980 of the energy and 0.955 of the latency, against 0.835 and 0.738 without it; never above the cost."""
    arch, op = _simba_layer()
    got = _fractions(InteriorLaneContext, op, arch, SIMBA_BEST)
    assert all(e <= 1 + 1e-12 and l <= 1 + 1e-12 for e, l in got), got
    assert all(e == pytest.approx(0.9804, abs=1e-4) and l == pytest.approx(0.9548, abs=1e-4) for e, l in got[:4]), got
    # Rule B57 counts the same weight reads at these nodes on its own (each round of the padded fan-out reads the
    # weights once, idle lanes included): with it on, B60 off changes nothing here, so both go off.
    rules_off("B60", "B57")
    without = _fractions(InteriorLaneContext, op, arch, SIMBA_BEST)
    assert all(e == pytest.approx(0.8347, abs=1e-4) and l == pytest.approx(0.7380, abs=1e-4) for e, l in without[1:4])


def test_the_first_tiles_of_clipped_lanes_are_clipped(rules_off):
    """Once PX and PY are fixed no position of the nest is whole (P and Q overshoot): the PE input buffers' first tiles
    are 512 x (4, 4, 4, 3) x (4, 4, 4, 3) = 115,200 elements, the model's count, not 16 whole tiles of 8,192. With rule
    B61 the leaf's energy bound is the cost (to 1e-4); counting whole tiles, it exceeds the cost (not a bound)."""
    arch, op = _simba_layer()
    got = _fractions(InteriorLaneContext, op, arch, SIMBA_BEST)
    assert got[-1][0] == pytest.approx(1.0, abs=1e-4) and got[-1][0] <= 1 + 1e-12
    rules_off("B61")
    whole = _fractions(InteriorLaneContext, op, arch, SIMBA_BEST)
    assert whole[-1][0] > 1.004, whole


def test_interior_lanes_refetch_their_windows():
    """The leaf loops K = 256 in the global buffer level around the PE input buffers, refetching the input windows
    at every K step; the input reads P and Q through windows (p + r), which rules B49 and B50 leave out. Rule B62
    counts the 3 x 3 of 4 x 4 PEs whose P and Q ranges are never clipped: the leaf's bound goes from 0.08 of its energy
    and 0.06 of its latency to 0.71 and 0.70."""
    arch, op = _simba_layer()
    got = _fractions(InteriorLaneContext, op, arch, SIMBA_LEAF)
    was = _fractions(BusyLaneContext, op, arch, SIMBA_LEAF)
    assert all(e <= 1 and l <= 1 for e, l in got)
    assert got[-1][0] == pytest.approx(0.7105, abs=1e-4) and got[-1][1] == pytest.approx(0.7023, abs=1e-4), got
    assert was[-1][0] == pytest.approx(0.0818, abs=1e-4) and was[-1][1] == pytest.approx(0.0557, abs=1e-4), was


def test_node_bounds_with_rules_b60_to_b62_never_exceed_the_cost():
    """At every level of random padded Ruby-S mappings of simba_like, ascend_like and a buffer over four PE registers,
    the bound with rules B60-B62 is at most the mapping's energy and latency, and above the bound without B60's open
    fan-outs' cap and B62 on some nodes."""
    checked = raised = 0
    archs = [get_accelerator(n) for n in ("simba_like", "ascend_like")] + [pes_under_four("8 B"), pes_under_four()]
    for arch, op, m, spatial in padded_ruby_s_mappings(600, archs, seed=18):
        res = evaluate(op, arch, m)
        ctx = InteriorLaneContext(op, arch, m.keep, spatial)
        was_ctx = BusyLaneContext(op, arch, m.keep, spatial)
        for level in range(len(arch.levels) + 1):
            fixed, rem, full = _node(op, m, level)
            got = ctx.lower_bound(fixed, level, rem, full_positions=full)
            assert _below(got, res), (arch.name, op, level, m)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(bounds_module, "merge_room", lambda *args: math.inf)
                was = was_ctx.lower_bound(fixed, level, rem, full_positions=full)
            raised += got[0] > was[0] * (1 + 1e-9) or got[1] > was[1] * (1 + 1e-9)
            checked += 1
    assert checked >= 300, checked


def _divisor_split(rng: random.Random, n: int, parts: int) -> list[int]:
    out = []
    for _ in range(parts - 1):
        d = rng.choice([d for d in range(1, n + 1) if n % d == 0])
        out.append(d)
        n //= d
    return out + [n]


def test_node_bounds_on_random_nests_of_the_padded_simba_subtree(rules_off):
    """The padded subtree of ResNet-18 layer4.0.conv2 on simba_like (PX:P4 PY:Q4 VK:K2,P2,Q2 VC:C8): random temporal
    nests of K, C, R and S over DRAM, the global buffer and the PE input buffers, in random orders, under two bypass
    choices. At every level the bound with rules B60-B62 is at most the cost, and above the bound without B60's open
    fan-outs' cap and B62 on most nests."""
    arch, op = _simba_layer()
    rng = random.Random(4)
    keeps = (SIMBA_KEEP, (frozenset({"I", "W", "O"}), frozenset({"I", "O"}), frozenset({"I"}), frozenset({"W"}),
                          frozenset({"O"})))
    spatial_loops = tuple(Loop(*x) for x in SIMBA_BEST if x[3] is not None)
    checked = raised = 0
    for draw in range(24):
        keep = keeps[draw % 2]
        per_level: list[list[Loop]] = [[], [], []]
        for d, n in (("K", 256), ("C", 64), ("R", 3), ("S", 3)):
            for level, b in enumerate(_divisor_split(rng, n, 3)):
                if b > 1:
                    per_level[level].append(Loop(d, b, level))
        for loops in per_level:
            rng.shuffle(loops)
        # (the search puts a level's temporal loops before its spatial ones: the global buffer's fan-out is level 1's)
        nest = tuple(per_level[0]) + tuple(per_level[1]) + tuple(l for l in spatial_loops if l.level == 1) + \
            tuple(per_level[2]) + tuple(l for l in spatial_loops if l.level == 4)
        m = Mapping(nest, keep)
        res = evaluate(op, arch, m, check=False)
        ctx = InteriorLaneContext(op, arch, keep, SIMBA_SPATIAL)
        was_ctx = BusyLaneContext(op, arch, keep, SIMBA_SPATIAL)
        up = False
        for level in range(len(arch.levels) + 1):
            fixed, rem, full = _node(op, m, level)
            got = ctx.lower_bound(fixed, level, rem, full_positions=full)
            assert _below(got, res), (level, m)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(bounds_module, "merge_room", lambda *args: math.inf)
                was = was_ctx.lower_bound(fixed, level, rem, full_positions=full)
            up |= got[0] > was[0] * (1 + 1e-9)
            checked += 1
        raised += up
    assert checked == 24 * 6 and raised >= 12, (checked, raised)


def test_interior_share_counts_lanes_whole_at_the_last_time():
    """P = 7 over 4 lanes of extent 2 (offsets 0, 2, 4, 6): three ranges stay whole, the fourth is clipped to one index;
    a dim the operand does not use counts every non-empty lane (four)."""
    from accelmap.search.padded_interior_lanes import interior_share

    arch = pes_under_four()
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", {"k": 2, "p": 7, "r": 3}, name="conv1d"), arch)
    fixed = (Loop("p", 4, 1, "X"), Loop("p", 2, 2), Loop("r", 3, 2), Loop("k", 2, 2))
    ones = dict.fromkeys(op.dim_names, 1)
    assert interior_share(op, fixed, ones, 2, frozenset({"p"}), op.operand("I")) == 0.75
    assert interior_share(op, fixed, ones, 2, frozenset({"p"}), op.operand("W")) == 1.0
    assert interior_share(op, fixed, {**ones, "p": 2}, 2, frozenset({"p"}), op.operand("I")) == 0.0


def test_rule_b62_alone_keeps_the_exhaustive_optimum(monkeypatch):
    """The exhaustive-checked case of rules B49/B50 (a 1-D convolution K = 2, P = 5, R = 2 on the small PE array with
    12 B registers, energy; its exhaustive Ruby-S optimum 850 pJ): with B49/B50 off, rule B62 counts the never-clipped
    lanes' input windows itself, and the exact search (no heuristic incumbent) visits 45 nodes, as with B49/B50, not the
    52 it visits with all three off, and proves the exhaustive optimum."""
    import accelmap.search.padded_interior_lanes as interior_lanes
    from accelmap.search.exact import search_exact
    from test_bound_padded_busy_lanes import EXHAUSTIVE_CONV

    arch = pes_under_four("12 B")
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", {"k": 2, "p": 5, "r": 2}, name="conv1d"), arch)
    monkeypatch.setattr(BusyLaneContext, "lanes", lambda self, c, clips: None)
    got, st = search_exact(op, arch, "energy", heuristic=False)
    assert st.extra["proven"] and got[0].value == EXHAUSTIVE_CONV and st.nodes == 45, (got[0].value, st.nodes)
    monkeypatch.setattr(interior_lanes, "interior_share", lambda *args: 0.0)
    got, st = search_exact(op, arch, "energy", heuristic=False)
    assert st.extra["proven"] and got[0].value == EXHAUSTIVE_CONV and st.nodes == 52, (got[0].value, st.nodes)
