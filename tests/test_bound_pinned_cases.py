"""Rule B33 (docs/mapper.md, ``search/pinned_cases.py``): in the cases where the innermost temporal loop runs over a plain
dim of an operand pinned in a one-element level, the operand refills there at every step. S1 takes per combination of
level sets and per case the refills' energy and stall, paired by B25. The paired bound must stay below the objective of
random mappings (perfect, imperfect, padded) of edge_tpu_like and a small register machine, the exact search must find
the exhaustive optimum where the rule raises the bounds, and edge_tpu_like's certificate must rise."""

from __future__ import annotations

import math

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.search import pinned_cases, pinned_stall
from accelmap.search.bounds import chain_options
from accelmap.search.objective import scalar
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import certified_lower_bound, enumerate_spatial, unrolling_bounds
from accelmap.workload import conv2d, gemm
from test_bound_pinned_stall import REGISTERS, assert_exact_equals_exhaustive, own_unrolling_cases


def _without_rule(patch):
    patch.setattr(pinned_cases.PinnedCases, "cases", pinned_stall.PinnedStall.cases)


def test_paired_cases_never_exceed_the_objective(monkeypatch):
    """Each scalar objective: the paired S1 bound of a mapping's own unrolling (and, on some, the certificate) is at
    most the mapping's objective, on random mappings (perfect, imperfect, padded) of edge_tpu_like and the register
    machine; the rule raises the EDP bound of many of them."""
    checked = raised = 0
    every = Constraints()
    for n, arch, op, m, res, chains, space in own_unrolling_cases(7, [REGISTERS, get_accelerator("edge_tpu_like")],
                                                                   16, 3):
        for objective in ("energy", "latency", "edp"):
            value = scalar(objective, res.energy_total, res.latency)
            assert scalar(objective, *unrolling_bounds(op, arch, space, chains, objective))[0] <= value * (1 + 1e-9), \
                (arch.name, objective, m)
        if n % 4 == 1:
            assert certified_lower_bound(op, arch, every, chains, "edp")[0] <= \
                res.energy_total * res.latency * (1 + 1e-9), (arch.name, m)
        with_rule = scalar("edp", *unrolling_bounds(op, arch, space, chains, "edp"))[0]
        with monkeypatch.context() as patch:
            _without_rule(patch)
            without = scalar("edp", *unrolling_bounds(op, arch, space, chains, "edp"))[0]
        assert with_rule >= without * (1 - 1e-12)
        raised += with_rule > without * (1 + 1e-9)
        checked += 1
    assert checked >= 10 and raised >= 3, (checked, raised)


def test_exact_search_equals_exhaustive_where_the_rule_raises_the_bounds(monkeypatch):
    """A GEMM of M = K = 2 on the register machine: the rule raises the paired EDP bound of some unrollings, and the exact
    search (no heuristic incumbent) finds the exhaustive optimum of every objective, proven; the certificate stays
    at or below it."""
    op = adopt_precision(gemm("g", m=2, n=1, k=2), REGISTERS)
    chains = chain_options(op, keep_options(op, REGISTERS, Constraints()))
    space = enumerate_spatial(op, REGISTERS, Constraints(), max_dims=3, pad="every")
    with_rule = scalar("edp", *unrolling_bounds(op, REGISTERS, space, chains, "edp"))
    with monkeypatch.context() as patch:
        _without_rule(patch)
        without = scalar("edp", *unrolling_bounds(op, REGISTERS, space, chains, "edp"))
    assert (with_rule >= without * (1 - 1e-12)).all() and (with_rule > without * (1 + 1e-9)).any()
    assert_exact_equals_exhaustive(op, REGISTERS, chains)


def test_the_rule_raises_edge_tpu_likes_certificate(monkeypatch):
    """ResNet-18 layer1.0.conv1 on edge_tpu_like: the certificate's EDP bound is 3.5746e13 pJ x cycles without the
    rule and 1.0871e14 with it (3.04x): every mapping refills the weight register or the partial-sum register at every
    step. Its unpaired energy and latency minima stay the same."""
    arch = get_accelerator("edge_tpu_like")
    op = adopt_precision(conv2d("layer1.0.conv1", c=64, h=56, w=56, k=64, r=3, s=3, padding=1), arch)
    chains = chain_options(op, keep_options(op, arch, Constraints()))
    # (rule B72, the stall on top of the MACs' streaming, raises it further: 1.3214e14, latency minimum 163,072)
    assert math.isclose(certified_lower_bound(op, arch, Constraints(), chains, "edp")[0], 132142642962104.31,
                        rel_tol=1e-9)
    monkeypatch.setattr("accelmap.search.bounds.MAC_STREAM_STALL", False)
    got = certified_lower_bound(op, arch, Constraints(), chains, "edp")
    assert math.isclose(got[0], 108710800989880.33, rel_tol=1e-9)
    with monkeypatch.context() as patch:
        _without_rule(patch)
        before = certified_lower_bound(op, arch, Constraints(), chains, "edp")
    assert math.isclose(before[0], 35746186331351.04, rel_tol=1e-9)
    assert got[1:] == before[1:] == (170199756.8, 153824.0)
