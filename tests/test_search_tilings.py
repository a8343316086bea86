"""Maximal-tiling enumeration against brute force, and padded spatial constraints."""

import itertools
import math

import numpy as np
import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.errors import MappingError, SpecError
from accelmap.mapping.validate import check_capacity, tile_fits
from accelmap.mapping.sampling import prime_factors
from accelmap.search.heuristic import search_heuristic
from accelmap.search.mapper import map_operator
from accelmap.search.space import Constraints, keep_options
from accelmap.search.tiling import ordered_mapping, padded_operator, spatial_at
from accelmap.search.tilings import maximal_tilings
from accelmap.workload import conv2d, gemm


def _splits(n, parts):
    """Every ordered factorization of n into ``parts`` factors."""
    if parts == 1:
        yield (n,)
        return
    for f in range(1, n + 1):
        if n % f == 0:
            for rest in _splits(n // f, parts - 1):
                yield (f,) + rest


def _brute_maximal(op, arch, keep, spatial, rem):
    """Every perfect tiling that fits, kept if at each level c >= 1 (innermost first) no dim could
    take the smallest prime of its outer factors at c without overflowing c or a level outside it."""
    dims, nlev = op.dim_names, len(arch.levels)
    sp = spatial_at(spatial)
    sp_in = [{d: math.prod(sp.get(l, {}).get(d, 1) for l in range(c, nlev)) for d in dims} for c in range(nlev)]
    out = set()
    for combo in itertools.product(*(list(_splits(rem[d], nlev)) for d in dims)):
        F = np.array(combo, dtype=np.int64).T            # level x dim
        temporal = {lv: {d: int(F[lv, i]) for i, d in enumerate(dims) if F[lv, i] > 1} for lv in range(nlev)}
        try:
            check_capacity(op, arch, ordered_mapping(temporal, spatial, keep, tuple(dims), nlev))
        except MappingError:
            continue
        ok = True
        for c in range(1, nlev):
            cum = {d: int(np.prod(F[c:, i])) for i, d in enumerate(dims)}
            for i, d in enumerate(dims):
                q = rem[d] // cum[d]
                if q == 1:
                    continue
                grown = dict(cum, **{d: cum[d] * prime_factors(q)[0]})
                if all(tile_fits(op, arch, keep[c2], c2, {x: grown[x] * sp_in[c2][x] for x in dims})
                       for c2 in range(c, -1, -1)):
                    ok = False
        if ok:
            out.add(F.tobytes())
    return out


@pytest.mark.parametrize("preset,spatial", [
    ("eyeriss_like", {}),
    ("eyeriss_like", {(1, "X"): {"P": 2}}),
    ("tpu_like", {(1, "X"): {"C": 2}, (1, "Y"): {"K": 2}}),
])
def test_maximal_tilings_equal_brute_force(preset, spatial):
    arch = get_accelerator(preset)
    op = adopt_precision(conv2d("c", c=4, h=6, w=4, k=4, r=3, s=1, padding=0), arch)
    axes = {a.name: i for i, lv in enumerate(arch.levels) if lv.fanout for a in lv.fanout.axes}
    spatial = {(axes[ax], ax): o for (_, ax), o in spatial.items()}
    op_pad, rem = padded_operator(op, spatial)
    checked = 0
    for keep in keep_options(op, arch, Constraints())[:6]:
        got = maximal_tilings(op_pad, arch, keep, spatial, rem, np.random.default_rng(0))
        want = _brute_maximal(op_pad, arch, keep, spatial, rem)
        assert {F.tobytes() for F in got} == want
        checked += len(want)
    assert checked > 0


def test_padded_spatial_constraint_is_mapped_and_covers_the_operator():
    arch = get_accelerator("tpu_like")
    op = adopt_precision(gemm("g", m=7, n=20, k=12), arch)
    out_dim = next(d for d in op.output.dims if op.sizes[d] == 7)
    ax = next(a.name for lv in arch.levels if lv.fanout for a in lv.fanout.axes if not a.reduce)
    cons = Constraints(spatial={ax: {out_dim: 4}})
    res, _ = search_heuristic(op, arch, "edp", constraints=cons, time_limit=20)
    m = res[0].mapping
    assert m.dim_product(out_dim) == 8            # 7 padded to two rounds of 4
    # the other dims are covered exactly: the padded round is the only waste
    assert all(m.dim_product(d) == op.sizes[d] for d in op.dim_names if d != out_dim)
    assert res[0].result.mac_slots == op.macs // 7 * 8
    with pytest.raises(SpecError, match="perfect factorizations only"):
        map_operator(op, arch, "edp", constraints=cons, strategy="optimal")


def test_padding_a_reduced_dim_is_refused():
    arch = get_accelerator("tpu_like")
    op = adopt_precision(gemm("g", m=8, n=8, k=7), arch)
    red = next(d for d in op.dim_names if d not in op.output.dims)
    ax = next(a.name for lv in arch.levels if lv.fanout for a in lv.fanout.axes if a.reduce)
    with pytest.raises(SpecError, match="reduced spatially"):
        Constraints(spatial={ax: {red: 4}}).check(op, arch)
