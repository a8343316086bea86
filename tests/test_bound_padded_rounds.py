"""Rules B44 and B45 (docs/mapper.md): over a padded unrolling's Ruby-S tiles, an input that uses no padded dim counts
its refetches at every position of the fixed nest at the boundaries above the padded fan-out
(``search/padded_round_positions.py``), and the mirror of a padded unrolling searched to the end is skipped
(``search/padded_mirrors.py``). The node bounds must stay below the cost of random Ruby-S mappings with a padded
unrolling at every level; the rule must raise some of them (so the check sees it); the exact search must keep the
exhaustive Ruby-S optimum where the rules cut."""

from __future__ import annotations

import random

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.schema import accelerator_from_dict
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping
from accelmap.search.exact import search_exact
from accelmap.search.imperfect_tiles import ImperfectBoundContext, ceil_div, dim_products, full_positions
from accelmap.search.optimal import bound_any_order
from accelmap.search.padded_mirrors import padded_mirror_keys
from accelmap.search.padded_round_positions import RubySBoundContext, padded_dims
from accelmap.workload import conv2d, parse_expression
from strategies import random_operator
from test_imperfect_search import row_of_four


def _ruby_s(op, m) -> bool:
    """Is ``m`` a Ruby-S mapping (every temporal loop divides what the loops inside it leave of its dim)?"""
    left = dict(op.sizes)
    for l in reversed(m.loops):
        if not l.spatial and left[l.dim] % l.bound:
            return False
        left[l.dim] = ceil_div(left[l.dim], l.bound)
    return True


def _unrolling(arch, m) -> dict[str, dict[str, int]]:
    spatial: dict[str, dict[str, int]] = {name: {} for name in arch.fanout_axes()}
    for l in m.loops:
        if l.spatial and l.bound > 1:
            spatial[l.axis][l.dim] = spatial[l.axis].get(l.dim, 1) * l.bound
    return spatial


def _padded_mappings(draws: int, presets=("tpu_like", "vta_like", "eyeriss_like"), seed: int = 11):
    """Random Ruby-S mappings with a padded unrolling of the ``presets`` (tpu_like, vta_like, eyeriss_like) and a small
    buffer over a 4-wide fan-out, with the unrolling they use."""
    return padded_ruby_s_mappings(draws, [get_accelerator(n) for n in presets] + [buffer_over_four()], seed)


def padded_ruby_s_mappings(draws: int, archs, seed: int):
    """Random Ruby-S mappings with a padded unrolling of ``archs`` (in turn), with the unrolling they use."""
    rng = random.Random(seed)
    for n in range(draws):
        arch = archs[n % len(archs)]
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=60, imperfect=True, spatial_prob=0.9)
        except MappingError:
            continue
        spatial = _unrolling(arch, m)
        if _ruby_s(op, m) and padded_dims(op, spatial):
            yield arch, op, m, spatial


def test_node_bounds_with_every_position_never_exceed_the_cost():
    """At every level of random padded Ruby-S mappings (the fixed order and, rule B3/B4, every order of the node's
    level), the node bound with rule B44 is at most the mapping's energy and latency, and on some nodes it is above
    rule I2's bound (the rule fires)."""
    checked = raised = 0
    for arch, op, m, spatial in _padded_mappings(300):
        res = evaluate(op, arch, m)
        ctx = RubySBoundContext(op, arch, m.keep, spatial)
        plain = ImperfectBoundContext(op, arch, m.keep, spatial)

        def below(b, res=res):
            return b[0] <= res.energy_total * (1 + 1e-12) and b[1] <= res.latency * (1 + 1e-12)

        for level in range(len(arch.levels) + 1):
            fixed = tuple(l for l in m.loops if l.level >= level)
            prod = dim_products(op, fixed)
            rem = {d: ceil_div(op.sizes[d], prod[d]) for d in op.dim_names}
            full = full_positions(op, fixed)
            got = ctx.lower_bound(fixed, level, rem, full_positions=full)
            assert below(got), (arch.name, op, level, m)
            was = plain.lower_bound(fixed, level, rem, full_positions=full)
            raised += got[0] > was[0] * (1 + 1e-9) or got[1] > was[1] * (1 + 1e-9)
            if level < len(arch.levels):
                alts = bound_any_order(ctx, fixed, level, rem, frozenset({level}), imperfect="spatial")
                assert any(below(b) for b in alts), (arch.name, op, level, m)
            checked += 1
    assert checked >= 100 and raised >= 10, (checked, raised)


def buffer_over_four(capacity: str = "32 B", port: str = "16 bit/cycle"):
    """DRAM over a small buffer whose 4-wide multicast fan-out feeds the MACs (vta_like's shape in small)."""
    return accelerator_from_dict({"name": "buf4", "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "16 bit",
         "read_energy": "50 pJ", "write_energy": "50 pJ", "read_bandwidth": port, "write_bandwidth": port},
        {"name": "Buf", "holds": ["I", "W", "O"], "capacity": capacity, "width": "16 bit",
         "read_energy": "2 pJ", "write_energy": "2 pJ", "fanout": {"axes": [
             {"name": "X", "size": 4, "multicast": True, "reduce": False}], "transfer_energy": "1 pJ"}}],
        "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 32}}})


def test_exact_search_keeps_the_exhaustive_optimum_where_the_rule_cuts():
    """A 1-D convolution (K = 5 output channels, P = 5, R = 3) on a 24 B buffer over the 4-wide fan-out, energy: the
    padded unrollings of K and P leave the input (no K) counted at every position; found by a sweep of 60 small
    cases (the only one of them where the rule cut nodes). The exact search (no heuristic incumbent) visits fewer
    nodes with rule B44 than without and both find 4409 pJ, proven, the exhaustive Ruby-S optimum (``search_exhaustive(
    op, arch, "energy", imperfect="spatial")`` gives 4409 pJ in about 2 s of CPU, so it is not run here)."""
    arch = buffer_over_four("24 B", "32 bit/cycle")
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", {"k": 5, "p": 5, "r": 3}, name="conv1d"), arch)
    got, st = search_exact(op, arch, "energy", heuristic=False)
    saved = RubySBoundContext.refetch_positions
    RubySBoundContext.refetch_positions = lambda self, X, c, full, prod_r: full      # type: ignore[method-assign]
    try:
        off, st_off = search_exact(op, arch, "energy", heuristic=False)
    finally:
        RubySBoundContext.refetch_positions = saved      # type: ignore[method-assign]
    assert st.extra["proven"] and st_off.extra["proven"] and st.extra["spatial_padded_searched"] >= 1
    assert got[0].value == off[0].value == 4409.0
    assert st.nodes < st_off.nodes, (st.nodes, st_off.nodes)


def test_mirror_keys_of_a_padded_unrolling():
    """The key of K4,P4 on one axis is the mirror key of K4,Q4 under P<->Q (and a self-mirror unrolling's keys are
    equal)."""
    swap = {"P": "Q", "Q": "P"}
    a = {(1, "Y"): {"K": 4, "P": 4, "Q": 1}, (1, "Z"): {"C": 16}}
    b = {(1, "Y"): {"K": 4, "Q": 4}, (1, "Z"): {"C": 16, "P": 1}}
    assert padded_mirror_keys(a, swap)[1] == padded_mirror_keys(b, swap)[0]
    assert padded_mirror_keys(b, swap)[1] == padded_mirror_keys(a, swap)[0]
    own, image = padded_mirror_keys({(1, "Y"): {"P": 2, "Q": 2}}, swap)
    assert own == image


def test_exact_search_skips_padded_mirrors_and_keeps_the_optimum(monkeypatch):
    """A 3x3 output convolution on a 4-wide axis (P and Q padded as rounds of 2, symmetric in P<->Q): the exact
    search (no heuristic incumbent) skips the mirror of a padded unrolling it searched, and finds the same optimum as
    with rule B45 off, 13,122 (EDP), the exhaustive Ruby-S optimum (``search_exhaustive(op, arch, "edp",
    imperfect="spatial")``, about 1 s of CPU, not run here)."""
    import accelmap.search.exact as exact

    arch = row_of_four()
    op = adopt_precision(conv2d("c", c=1, h=3, w=3, k=2, r=1, s=1), arch)
    got, st = search_exact(op, arch, "edp", heuristic=False)
    with monkeypatch.context() as patch:
        patch.setattr(exact, "padded_mirror_keys", lambda assignment, swap: ((object(),), (object(),)))
        off, st_off = search_exact(op, arch, "edp", heuristic=False)
    assert st.extra["proven"] and st_off.extra["proven"]
    assert got[0].value == off[0].value == 13122.0
    assert st.extra["spatial_mirror_skipped"] > st_off.extra["spatial_mirror_skipped"]
    assert st.extra["spatial_padded_searched"] < st_off.extra["spatial_padded_searched"]
