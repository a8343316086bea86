"""Rule B18 (docs/mapper.md): in the case where the innermost unfixed temporal loop runs over a dim that an operand
uses only inside a sliding-window index (a convolution's input and P or Q), every run of the fixed nest brings the
part of the operand's first tile that the previous run's last tile does not hold. The count must stay below the cost
of every completion, raise the bound where rules B7 and B15 count nothing for the input, and leave the exact search's
optimum unchanged."""

import random

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.search.bounds import BoundContext
from accelmap.search.exact import search_exact
from accelmap.search.spatial import unrolling_of
from accelmap.search.window_runs import least_new_on_axis
from accelmap.workload.constructors import conv2d
from accelmap.workload.index_sets import axis_mask
from accelmap.workload.models import load_model
from strategies import fixed_at_and_above, random_perfect_mappings
from test_bound_network_and_runs import _completions


def _without_rule(monkeypatch):
    """Rule B18 off: no operand is a sliding-window user of any dim."""
    monkeypatch.setattr("accelmap.search.bounds.window_users", lambda *a: ())
    monkeypatch.setattr("accelmap.search.node_bounds.window_users", lambda *a: ())


def test_least_new_on_axis_equals_brute_force():
    """The fewest new values of a window axis tile, for every previous-tile offset and least move, against every
    move the run's odometer could make (strides and dilations with holes included)."""
    rng = random.Random(3)
    for _ in range(25):
        coeffs = (rng.randint(1, 3), rng.randint(1, 3))
        extents = (rng.randint(1, 4), rng.randint(1, 4))
        mask = axis_mask(coeffs, extents)
        A = {v for v in range(mask.bit_length()) if mask >> v & 1}
        span = max(A) + 1
        old = [{a + offset for a in A} for offset in range(span + 2)]
        for offset in range(span + 2):
            for move in range(1, span + 3):
                # Past 2 x span either way the tiles are disjoint.
                brute = min(len({a + delta for a in A} - old[offset])
                            for delta in range(-2 * span - move, 2 * span + move + 1) if abs(delta) >= move)
                assert least_new_on_axis(coeffs, extents, offset, move) == brute, (coeffs, extents, offset, move)


LAYER1_CONV1 = Mapping(
    (Loop("P", 8, 0), Loop("K", 2, 0), Loop("C", 2, 1), Loop("K", 2, 1), Loop("Q", 56, 1), Loop("C", 2, 1, "X"),
     Loop("P", 7, 1, "X"), Loop("C", 4, 1, "Y"), Loop("R", 3, 1, "Y"), Loop("C", 4, 2), Loop("K", 16, 2), Loop("S", 3, 2)),
    (frozenset("IWO"), frozenset("IO"), frozenset("IWO")))


def test_window_runs_raise_the_bound_on_eyeriss_layer1_conv1(monkeypatch):
    """eyeriss_like ResNet-18 layer1.0.conv1 (R unrolled on the array, S in the register files): with the register
    files fixed and the global buffer open, the input's window over Q moves by one of its three columns at every
    step of a Q loop above them, so in the case where that loop is innermost every run brings a third of a tile.
    The latency bound rises from 782,905 to 1,009,557 cycles of the mapping's 1,132,471 (and with the global buffer
    fixed from 1,041,831 to 1,057,959), and stays below the cost of random completions of each node."""
    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(next(l for l in load_model("resnet18").layers if l.name == "layer1.0.conv1").operator, arch)
    m = LAYER1_CONV1
    res = evaluate(op, arch, m)
    assert res.latency == pytest.approx(1_132_471.111111111, rel=1e-12)
    # (rules B56, B59 and B71 off: they add the first input tile's load and, with the global buffer fixed, the last
    # output tile's drain, 3,136 cycles, to these values, and the first tiles' loads queued on one port)
    monkeypatch.setattr("accelmap.search.bounds.first_fill_terms", lambda *a: [])
    monkeypatch.setattr("accelmap.search.bounds.first_queue_terms", lambda *a, **k: [])
    monkeypatch.setattr("accelmap.search.bounds.last_drain_terms", lambda *a, **k: [])
    want = {2: (721_845_760.0, 1_009_557.333333333), 1: (779_376_352.0, 1_057_959.111111111)}
    rng = random.Random(7)
    bounds = {}
    for level in (2, 1):
        fixed, rem = fixed_at_and_above(op, m, level)
        bounds[level] = BoundContext(op, arch, m.keep, unrolling_of(arch, m)).lower_bound(fixed, level, rem)
        assert bounds[level] == pytest.approx(want[level], rel=1e-12)
        for cand in [m, *_completions(rng, op, arch, m, level, 4)]:
            got = evaluate(op, arch, cand, check=False)
            assert bounds[level][0] <= got.energy_total * (1 + 1e-12)
            assert bounds[level][1] <= got.latency * (1 + 1e-12)
    _without_rule(monkeypatch)
    before = {2: (702_107_392.0, 782_904.888888889), 1: (765_119_200.0, 1_041_831.111111111)}
    for level in (2, 1):
        fixed, rem = fixed_at_and_above(op, m, level)
        got = BoundContext(op, arch, m.keep, unrolling_of(arch, m)).lower_bound(fixed, level, rem)
        assert got == pytest.approx(before[level], rel=1e-12)


def test_window_runs_never_exceed_any_completion(monkeypatch):
    """At every level of random mappings of random convolutions (strides, dilations, padding) on three presets, with
    the unrolling known, the bound is at most the cost of the mapping and of random completions of the node, and
    B18 raises it on some nodes."""
    nodes, raised = [], 0
    for rng, arch, op, m in random_perfect_mappings(41, 24, ["eyeriss_like", "tpu_like", "ascend_like"]):
        if not any(len(ix.terms) > 1 for X in op.operands for ix in X.indices):
            continue
        for level in range(1, len(arch.levels)):
            fixed, rem = fixed_at_and_above(op, m, level)
            e_lb, l_lb = BoundContext(op, arch, m.keep, unrolling_of(arch, m)).lower_bound(fixed, level, rem)
            for cand in [m, *_completions(rng, op, arch, m, level, 3)]:
                got = evaluate(op, arch, cand, check=False)
                assert e_lb <= got.energy_total * (1 + 1e-12) and l_lb <= got.latency * (1 + 1e-12), (level, cand)
            nodes.append((arch, op, m, level, e_lb, l_lb))
    _without_rule(monkeypatch)
    for arch, op, m, level, e_lb, l_lb in nodes:
        fixed, rem = fixed_at_and_above(op, m, level)
        e0, l0 = BoundContext(op, arch, m.keep, unrolling_of(arch, m)).lower_bound(fixed, level, rem)
        assert e_lb >= e0 * (1 - 1e-12) and l_lb >= l0 * (1 - 1e-12)
        raised += e_lb > e0 * (1 + 1e-9) or l_lb > l0 * (1 + 1e-9)
    assert len(nodes) >= 20 and raised >= 3, (raised, len(nodes))


def test_exact_search_keeps_its_optimum_with_window_runs(monkeypatch):
    """The exact search (the unrolling searched) finds the same optimum with rule B18 as without it
    (whose optimum tests/test_search.py checks against exhaustive search), costing no more leaves."""
    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(conv2d("conv", n=1, c=2, h=4, w=1, k=1, r=2, s=1), arch)
    runs = {}
    for rule in (True, False):
        if not rule:
            _without_rule(monkeypatch)
        for objective in ("edp",):
            got, st = search_exact(op, arch, objective, heuristic=False, time_limit=120)
            assert st.extra["proven"]
            runs[(rule, objective)] = (got[0].value, st.evaluated)
    for objective in ("edp",):
        assert runs[(True, objective)][0] == pytest.approx(runs[(False, objective)][0], rel=1e-12)
        assert runs[(True, objective)][1] <= runs[(False, objective)][1]
