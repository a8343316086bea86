"""The heuristic's batched probes against probing one unrolling at a time, and the batched cost form."""

import math

import numpy as np
import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.search import probes
from accelmap.search.bounds import chain_options
from accelmap.search.heuristic_config import HeuristicConfig
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import ranked_spatial
from accelmap.search.tiling import padded_operator
from accelmap.search.tilings import cost_rows, cost_rows_many, dim_orders, random_tilings, rank_tilings, seed_tilings
from accelmap.workload import conv2d, gemm


def _setup(preset, op):
    arch = get_accelerator(preset)
    op = adopt_precision(op, arch)
    cons = Constraints()
    keeps = keep_options(op, arch, cons)
    by_fullness = sorted(keeps, key=lambda kp: -sum(len(x) for x in kp))
    ranked = ranked_spatial(op, arch, cons, chain_options(op, keeps), "edp", limit=64)
    return arch, op, by_fullness, ranked


def _sequential(op, arch, ranked, by_fullness, orders, rng, config):
    """The probes one unrolling at a time, as the heuristic ran them before they were batched."""
    found, cut, best = [], 0, math.inf
    for cand in ranked:
        if cand.bound("edp") >= best:
            cut += 1
            continue
        if len(found) >= config.max_probes:
            break
        spatial = cand.assignment
        op_pad, rem = padded_operator(op, spatial)
        for keep in by_fullness:
            F = np.concatenate(seed_tilings(op_pad, arch, keep, spatial, rem, rng,
                                            rows_per_level=config.probe_rows_per_level))
            R = random_tilings(op_pad, arch, keep, spatial, rem, rng, config.probe_random_tilings)
            if not len(F) and not len(R):
                continue
            (top,), _ = rank_tilings(op_pad, arch, keep, spatial, [np.concatenate([F, R])], "edp", orders, top=1)
            found.append((top[0].value, spatial))
            best = min(best, top[0].value)
            break
    return found, cut


CASES = [
    ("eyeriss_like", conv2d("c", c=4, h=8, w=8, k=8, r=3, s=3)),
    ("tpu_like", gemm("g", m=64, n=64, k=64)),
    ("vta_like", gemm("g", m=16, n=64, k=64)),
]
# Unrollings skipped by their bound (on tpu_like and vta_like, none on eyeriss_like): a batch is cut
# short there, and the generator goes back.
SKIPS = {"eyeriss_like": False, "tpu_like": True, "vta_like": True}


@pytest.mark.parametrize("preset,op", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("batch", [2, 16])
def test_batched_probes_equal_sequential_probes(monkeypatch, preset, op, batch):
    """Same unrollings probed, same values to the bit, same skips, and the generator left where the sequence
    leaves it, whatever the batch size (batches are cut short by skips on two cases)."""
    arch, op, by_fullness, ranked = _setup(preset, op)
    config = HeuristicConfig(max_probes=12, probe_rows_per_level=20, probe_random_tilings=30)
    orders = dim_orders(op)
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    want, want_cut = _sequential(op, arch, ranked, by_fullness, orders, rng_a, config)
    monkeypatch.setattr(probes, "BATCH", batch)
    got = probes.probe_unrollings(op, arch, ranked, by_fullness, "edp", orders, rng_b, config)
    assert [v for v, _ in got.found] == [v for v, _ in want]
    assert [sp for _, sp in got.found] == [sp for _, sp in want]
    assert got.cut_by_bound == want_cut
    assert rng_a.integers(1 << 62) == rng_b.integers(1 << 62)
    assert want and (want_cut > 0) == SKIPS[preset]


def test_several_unrollings_in_one_call_cost_as_each_alone():
    """batch_form's shared structure (the other unrollings' spatial loops at bound 1) gives every row the
    value a call of its own gives, to the bit."""
    arch, op, by_fullness, ranked = _setup("eyeriss_like", conv2d("c", c=8, h=10, w=10, k=16, r=3, s=3))
    rng = np.random.default_rng(0)
    spatials, groups = [], []
    for cand in ranked:
        op_pad, rem = padded_operator(op, cand.assignment)
        if op_pad is not op:
            continue
        F = np.concatenate(seed_tilings(op, arch, by_fullness[0], cand.assignment, rem, rng, rows_per_level=30))
        if len(F):
            spatials.append(cand.assignment)
            groups.append(F)
        if len(spatials) == 6:
            break
    assert len({tuple(sorted((k, tuple(v.items())) for k, v in sp.items())) for sp in spatials}) == 6
    for order in dim_orders(op)[:2]:
        together = cost_rows_many(op, arch, by_fullness[0], spatials, groups, "edp", order)
        alone = np.concatenate([cost_rows(op, arch, by_fullness[0], sp, F, "edp", order)
                                for sp, F in zip(spatials, groups, strict=True)])
        assert np.array_equal(together, alone)
