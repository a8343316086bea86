"""The fused groups' tile mapper: no certified bound after each tile search, and the bound's floor where its
relaxation would hold too many unrolling combinations (a GPT-3 layer on a 128x128 array ran out of memory there)."""

from __future__ import annotations

from dataclasses import replace

import accelmap.search.spatial as spatial
from accelmap.arch.presets import get_accelerator
from accelmap.fusion.model_fusion import TILE_HEURISTIC, mapper_search
from accelmap.mapping.validate import validate
from accelmap.search.bounds import chain_options
from accelmap.search.mapper import map_operator
from accelmap.search.space import Constraints, keep_options
from accelmap.workload.constructors import matmul

OP = matmul("mm", m=16, n=32, k=64, bits={"I": 8, "W": 8, "O": 32})
# Tile searches on CPU seconds, as a loaded machine's benchmark runs them.
CPU = replace(TILE_HEURISTIC, cpu_clock=True)


def _bound(arch):
    cons = Constraints()
    return spatial.certified_lower_bound(OP, arch, cons, chain_options(OP, keep_options(OP, arch, cons)), "edp")


def test_past_the_combination_limit_the_bound_is_the_mac_floor_and_below_the_full_one(monkeypatch):
    arch = get_accelerator("tpu_like")
    full = _bound(arch)
    monkeypatch.setattr(spatial, "BOUND_COMBINATIONS", 1)
    floor = _bound(arch)
    energy = OP.macs * arch.compute.mac_energy_pj
    latency = OP.macs / arch.peak_macs_per_cycle
    assert floor == (energy * latency, energy, latency)
    assert floor[1] <= full[1] and floor[2] <= full[2] and floor[0] <= full[0]


def test_tile_searches_skip_the_certified_bound(monkeypatch):
    import accelmap.search.mapper as mapper

    def no_bound(*args, **kwargs):
        raise AssertionError("a tile search computed the certified bound")
    monkeypatch.setattr(mapper, "certificate", no_bound)
    arch = get_accelerator("tpu_like")
    small = matmul("small", m=4, n=8, k=16, bits={"I": 8, "W": 8, "O": 32})
    plain = map_operator(small, arch, "edp", strategy="heuristic", time_limit=0.5, heuristic_config=CPU,
                         lower_bound=False)
    assert plain.best is not None and plain.lower_bound is None and not plain.proven_optimal
    validate(small, arch, mapper_search("edp", 0.5, CPU)(small, arch))


def test_past_the_combination_limit_the_mapper_says_its_bound_is_the_relaxed_one(monkeypatch):
    """map_operator's certificate does not take the floor silently: it reports the relaxed bound, with why."""
    arch = get_accelerator("tpu_like")
    full = map_operator(OP, arch, "edp", strategy="heuristic", time_limit=2.0, heuristic_config=CPU)
    monkeypatch.setattr(spatial, "BOUND_COMBINATIONS", 1)
    res = map_operator(OP, arch, "edp", strategy="heuristic", time_limit=2.0, heuristic_config=CPU)
    assert full.bound_kind == "full" and res.bound_kind == "relaxed"
    assert any("would combine more than 1 unrolling vectors" in note for note in res.notes)
    assert res.lower_bound is not None and res.lower_bound <= full.lower_bound


def test_a_tile_of_a_whole_layer_starts_from_the_layers_own_mapping():
    """``layer_warm_starts`` keys the layer-by-layer mappings as the tile operators are keyed (no stored shapes):
    a tile search given a better mapping of its whole layer returns at least as good a one, and a tile of another
    size does not take it."""
    from accelmap.cost.model import evaluate
    from accelmap.fusion.model_fusion import tile_key

    arch = get_accelerator("tpu_like")
    # the layer as an import has it: its tensors' stored shapes (a tile operator has none)
    shapes = {"O": (16, 32), "A": (16, 64), "B": (64, 32)}
    op = replace(OP, operands=tuple(replace(o, shape=shapes[o.name]) for o in OP.operands))
    best = map_operator(op, arch, "edp", strategy="heuristic", time_limit=0.3, heuristic_config=CPU,
                        lower_bound=False).best
    whole = replace(op, name="mm[16x1]", operands=tuple(replace(o, shape=(), pad_lo=()) for o in op.operands))
    assert tile_key(whole) == tile_key(op) and whole.signature() != op.signature()
    warm = {tile_key(op): (best.mapping,)}
    # a search cut almost at once: without the warm start it returns what it has, with it at least the layer's
    got = mapper_search("edp", 1e-4, CPU, warm=warm)(whole, arch)
    assert evaluate(whole, arch, got).edp <= best.result.edp
    half = replace(whole, dims=tuple((d, 8 if d == "M" else s) for d, s in whole.dims))
    assert tile_key(half) not in warm
