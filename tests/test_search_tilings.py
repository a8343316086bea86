"""Maximal-tiling enumeration against brute force, and padded spatial constraints."""

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.schema import accelerator_from_dict
from accelmap.errors import MappingError, SpecError
from accelmap.mapping.validate import check_capacity, tile_fits
from accelmap.mapping.sampling import prime_factors
from accelmap.search.heuristic import search_heuristic
from accelmap.search.heuristic_config import HeuristicConfig
from accelmap.search.mapper import map_operator
from accelmap.search.space import Constraints, keep_options
from accelmap.search.tiling import ordered_mapping, padded_operator, spatial_at
from accelmap.search.tilings import Packing, maximal_tilings, packings
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


def _brute_maximal(op, arch, keep, spatial, rem, own_dims_only=False):
    """Every perfect tiling that fits, kept if at each level c >= 1 (innermost first) no dim could
    take the smallest prime of its outer factors at c without overflowing c or a level outside it.
    ``own_dims_only``: a level c >= 1 has factors only of dims that index an operand it keeps, and
    only those must be unable to grow."""
    dims, nlev = op.dim_names, len(arch.levels)
    own = [{d for X in op.operands if X.name in keep[c] for d in X.dims} for c in range(nlev)]
    sp = spatial_at(spatial)
    sp_in = [{d: math.prod(sp.get(l, {}).get(d, 1) for l in range(c, nlev)) for d in dims} for c in range(nlev)]
    out = set()
    for combo in itertools.product(*(list(_splits(rem[d], nlev)) for d in dims)):
        F = np.array(combo, dtype=np.int64).T            # level x dim
        if own_dims_only and any(F[c, i] > 1 and d not in own[c] for c in range(1, nlev) for i, d in enumerate(dims)):
            continue
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
                if q == 1 or (own_dims_only and d not in own[c]):
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


def per_operand_chain(w_reg: str = "32 B", buf: str = "512 B"):
    """A small hierarchy of per-operand buffers like ZigZag's ascend_like: DRAM; an input/output buffer;
    a weight register under a 4-wide fan-out; an output register. The buffers are double-buffered when
    two tiles fit and stream a tile kept for the whole run, as the ZigZag import makes them."""
    def level(name, holds, cap, width, e_r, e_w, **more):
        return {"name": name, "holds": holds, "capacity": cap, "width": width, "read_energy": e_r,
                "write_energy": e_w, "read_bandwidth": f"{width}/cycle", "write_bandwidth": f"{width}/cycle",
                "bypass": False, **more}
    return accelerator_from_dict({
        "name": "per_operand_chain",
        "compute": {"mac_energy": "0.04 pJ", "precision": {"I": 8, "W": 8, "O": [16, 32]}, "final_output_bits": 8},
        "levels": [
            level("DRAM", ["I", "W", "O"], "unbounded", "64 bit", "700 pJ", "750 pJ", stream_single_tile=True),
            level("Buf", ["I", "O"], buf, "512 bit", "50 pJ", "60 pJ", double_buffered="when_fits",
                  stream_single_tile=True),
            level("WReg", ["W"], w_reg, "64 bit", "5 pJ", "6 pJ", double_buffered="when_fits", stream_single_tile=True,
                  fanout={"axes": [{"name": "X", "size": 4, "multicast": True, "reduce": True}]}),
            level("OReg", ["O"], "16 bit", "16 bit", "0.02 pJ", "0.02 pJ", written_at_clock_edge=True),
        ]})


@pytest.mark.parametrize("own,half", [(True, False), (False, True), (True, True)])
def test_packed_maximal_tilings_equal_brute_force(own, half):
    """The other packings: own dims only (brute force with that rule), and half of a level double-buffered
    when two tiles fit (brute force on the machine with those levels always double-buffered)."""
    arch = per_operand_chain()
    op = adopt_precision(gemm("g", m=8, n=4, k=8), arch)
    spatial = {(2, "X"): {"K": 4}}
    op_pad, rem = padded_operator(op, spatial)
    keep = keep_options(op, arch, Constraints())[0]
    assert len(packings(op, arch, keep, rem)) == 4
    brute_arch = replace(arch, levels=tuple(replace(lv, double_buffered=True) if half and lv.double_buffered_when_fits
                                            else lv for lv in arch.levels))
    got = maximal_tilings(op_pad, arch, keep, spatial, rem, np.random.default_rng(0), packing=Packing(own, half))
    want = _brute_maximal(op_pad, brute_arch, keep, spatial, rem, own_dims_only=own)
    assert {F.tobytes() for F in got} == want and want
    plain = {F.tobytes() for F in maximal_tilings(op_pad, arch, keep, spatial, rem, np.random.default_rng(0))}
    assert want != plain


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
    # (The exact search takes padded constraints, rule E2; the exhaustive one only with imperfect tiles.)
    with pytest.raises(SpecError, match="use --strategy optimal, --strategy heuristic or --imperfect spatial"):
        map_operator(op, arch, "edp", constraints=cons, strategy="exhaustive")


def test_padding_a_reduced_dim_is_refused():
    arch = get_accelerator("tpu_like")
    op = adopt_precision(gemm("g", m=8, n=8, k=7), arch)
    red = next(d for d in op.dim_names if d not in op.output.dims)
    ax = next(a.name for lv in arch.levels if lv.fanout for a in lv.fanout.axes if a.reduce)
    with pytest.raises(SpecError, match="reduced spatially"):
        Constraints(spatial={ax: {red: 4}}).check(op, arch)


def test_heuristic_finds_the_whole_operand_optimum_on_a_per_operand_chain():
    """On a small per-operand chain whose buffers stream tiles kept for the whole run, the exhaustive optimum
    keeps every operand whole in the buffer (no loop at DRAM: each element read once, streamed in). The heuristic
    must find it from its seeds and climbs alone (random sample cut to one tiling), as on ZigZag's ascend_like."""
    arch = per_operand_chain()
    op = adopt_precision(gemm("g", m=8, n=8, k=4), arch)
    cons = Constraints(spatial={"X": {"M": 4}}, orders={lv.name: tuple(op.dim_names) for lv in arch.levels})
    exact = map_operator(op, arch, "edp", constraints=cons, strategy="exhaustive", time_limit=120)
    assert exact.proven_optimal
    assert not [lp for lp in exact.best.mapping.loops if lp.level == 0 and lp.bound > 1]
    res, _ = search_heuristic(op, arch, "edp", constraints=cons, time_limit=60,
                              config=HeuristicConfig(random_tilings=1, probe_random_tilings=1, cpu_clock=True))
    assert res[0].value == pytest.approx(exact.best.value, rel=1e-9)
