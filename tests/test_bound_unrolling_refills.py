"""Rules B64 and B65 (docs/mapper.md): under every unrolling, a single-buffered level's least refill stalls compute, in
rule S1 (``spatial_lower_bound``) and the certificate (rule S2, ``certified_lower_bound``;
``search/unrolling_refills.py``). The bounds must stay below the cost of random mappings (imperfect and padded ones
included) where the rules raise them, and the least points must be the least of every point."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping
from accelmap.search.bounds import chain_options
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import certified_lower_bound, spatial_lower_bound
from accelmap.search.unrolling_refills import RefillCases, least_points
from accelmap.workload import parse_expression
from test_bound_padded_busy_lanes import pes_under_four

CONV = "O[k,p,q] += I[c,{s}*p+r,q+s] * W[k,c,r,s]"


def test_least_points_are_below_every_point():
    """Random integer points with repeats: every point is at least some kept point in every column, and no kept point
    is at most another kept one in every column (brute force over all pairs)."""
    rng = np.random.default_rng(5)
    for n, k in ((1, 1), (40, 2), (300, 3), (2500, 3)):
        pts = rng.integers(0, 12, size=(n, k)).astype(float)
        kept = least_points(pts, block=64)
        below = (kept[None, :, :] <= pts[:, None, :]).all(axis=2)
        assert below.any(axis=1).all()
        le = (kept[None, :, :] <= kept[:, None, :]).all(axis=2)
        np.fill_diagonal(le, False)
        assert not le.any()
        brute = {tuple(p) for p in pts if not any((q <= p).all() and (q != p).any() for q in pts)}
        assert brute == {tuple(p) for p in kept}


def _refills_off(monkeypatch):
    monkeypatch.setattr(RefillCases, "refill_stall", lambda self, pick: np.zeros(len(self.refill_above)))


def _mappings(arch, draws: int, seed: int, scale: int):
    """Random (imperfect, often padded) mappings of strided convolutions whose register tiles are binding (``scale``
    widens the channels)."""
    rng = random.Random(seed)
    for _ in range(draws):
        sizes = {"k": rng.randint(2, 6 * scale), "c": rng.randint(1, 3 * scale), "p": rng.randint(2, 7),
                 "q": rng.randint(2, 6), "r": rng.randint(1, 3), "s": rng.randint(1, 3)}
        op = adopt_precision(parse_expression(CONV.format(s=rng.choice((1, 2))), sizes, name="conv"), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=60, imperfect=True, spatial_prob=0.9)
        except MappingError:
            continue
        yield op, m


@pytest.mark.parametrize("name,draws,scale,least_raised", [("eyeriss_like", 16, 6, 2), ("edge_tpu_like", 30, 2, 0),
                                                           ("pe4", 40, 1, 3)])
def test_unrolling_bound_with_refills_never_exceeds_the_cost(monkeypatch, name, draws, scale, least_raised):
    """Rule S1 of a random mapping's own unrolling (its bypass choice the only one), with rules B64 and B65, is at most
    its energy and latency: eyeriss_like (single-buffered register files), edge_tpu_like (one-element registers) and
    a buffer over four small PE registers; on eyeriss_like and the small registers the rules raise the latency bound
    of some of them."""
    arch = pes_under_four("8 B") if name == "pe4" else get_accelerator(name)
    checked = raised = 0
    for op, m in _mappings(arch, draws, 13, scale):
        spatial = tuple(l for l in m.loops if l.axis is not None)
        chains = {X.name: [[i for i, kp in enumerate(m.keep) if X.name in kp]] for X in op.operands}
        res = evaluate(op, arch, m)
        energy, latency = spatial_lower_bound(op, arch, spatial, chains)
        assert energy <= res.energy_total * (1 + 1e-9) and latency <= res.latency * (1 + 1e-9), (op, m, latency)
        with monkeypatch.context() as mp:
            _refills_off(mp)
            _, was = spatial_lower_bound(op, arch, spatial, chains)
        raised += latency > was * (1 + 1e-9)
        checked += 1
    assert checked >= draws // 3 and raised >= least_raised, (checked, raised)


SMALL = (({"k": 8, "c": 4, "p": 6, "q": 5, "r": 3, "s": 3}, 1), ({"k": 6, "c": 3, "p": 5, "q": 4, "r": 3, "s": 2}, 2))


@pytest.mark.parametrize("name,convs,draws", [("eyeriss_like", (({"k": 32, "c": 16, "p": 8, "q": 8, "r": 3, "s": 3}, 1),),
                                                40), ("pe4", SMALL, 60)])
def test_certificate_with_refills_is_below_every_mapping(monkeypatch, name, convs, draws):
    """The certificate (rule S2 over every unrolling class and bypass choice, with rules B64 and B65) is at most the
    latency and EDP of every random mapping of the operator, padded and imperfect ones included, and above the
    certificate without the rules on one of the operators."""
    arch = pes_under_four("8 B") if name == "pe4" else get_accelerator(name)
    rng = random.Random(2)
    raised = 0
    for sizes, stride in convs:
        op = adopt_precision(parse_expression(CONV.format(s=stride), sizes, name="conv"), arch)
        cons = Constraints()
        chains = chain_options(op, keep_options(op, arch, cons))
        edp, _, latency = certified_lower_bound(op, arch, cons, chains, "edp")
        _, _, least_latency = certified_lower_bound(op, arch, cons, chains, "latency")
        with monkeypatch.context() as mp:
            _refills_off(mp)
            was = certified_lower_bound(op, arch, cons, chains, "edp")[0]
        raised += edp > was * (1 + 1e-9)
        drawn = 0
        for _ in itertools.repeat(None, draws):
            try:
                m = random_mapping(op, arch, rng, check_fit=True, tries=60, imperfect=rng.random() < 0.7,
                                   spatial_prob=0.9)
            except MappingError:
                continue
            res = evaluate(op, arch, m)
            assert edp <= res.energy_total * res.latency * (1 + 1e-9), (op, m)
            assert max(latency, least_latency) <= res.latency * (1 + 1e-9), (op, m)
            drawn += 1
        assert drawn >= draws // 4, drawn
    assert raised >= 1, raised



def test_e1_ranks_without_the_refill_stall_and_cuts_with_it():
    """E1 visits unrollings sorted by S1 without rule B64 (``ranking_latency``, main's bound) and cuts each by S1 with
    it: the ranking key is at most the bound on every row (so SubtreeOrder's stop at the first row the best found cuts,
    taken on the key the rows are sorted by, cuts only rows the bound cuts too) and below it on some; with B64 the
    bound's own order differs (layer3.0.downsample on eyeriss_like: a worse first unrolling in bound order)."""
    from accelmap.search.exact import ranked_unrollings
    from accelmap.search.objective import scalar
    from accelmap.workload.models import load_model

    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(next(x for x in load_model("resnet18").layers if x.name == "layer3.0.downsample").operator,
                         arch)
    chains = chain_options(op, keep_options(op, arch, Constraints()))
    u = ranked_unrollings(op, arch, Constraints(), "edp", chains)
    assert len(u.order) == len(u.latency) > 1
    assert (u.ranking_latency <= u.latency).all() and (u.ranking_latency < u.latency).any()
    key = scalar("edp", u.energy, u.ranking_latency)[u.order]
    assert (np.diff(key) >= 0).all()
    bound = scalar("edp", u.energy, u.latency)
    assert u.order[0] != int(np.argmin(bound))
