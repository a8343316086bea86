"""Whole-model mapping: dedup, totals, cache hits, resume, unmappable layers, constraint fitting."""

from __future__ import annotations

import sqlite3

import pytest

from accelmap.arch.schema import accelerator_from_dict
from accelmap.errors import SpecError
from accelmap.search import layer_pool
from accelmap.search.layer_constraints import fit_constraints
from accelmap.search.mapper import map_operator
from accelmap.search.model_mapper import map_model
from accelmap.search.space import Constraints
from accelmap.workload.constructors import conv2d, dense, gemm
from accelmap.workload.models import Layer, ModelImport

# Three levels and a 2x2 array: small enough that the exact search takes milliseconds.
TINY = {
    "name": "tiny",
    "compute": {"mac_energy": "1 pJ", "macs_per_cycle": 1, "precision": {"I": 8, "W": 8, "O": 32}},
    "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "64 bit",
         "read_energy": "100 pJ", "write_energy": "100 pJ", "read_bandwidth": "8 B/cycle",
         "write_bandwidth": "8 B/cycle"},
        {"name": "Buf", "holds": ["I", "W", "O"], "capacity": "256 B", "width": "32 bit",
         "read_energy": "6 pJ", "write_energy": "6 pJ",
         "fanout": {"transfer_energy": "0.5 pJ",
                    "axes": [{"name": "X", "size": 2, "multicast": True, "reduce": True},
                             {"name": "Y", "size": 2, "multicast": True, "reduce": False}]}},
        {"name": "Reg", "holds": ["W", "O"], "capacity": "16 words", "width": "8 bit",
         "read_energy": "0.1 pJ", "write_energy": "0.1 pJ", "bypass": False},
    ],
}


@pytest.fixture(scope="module")
def arch():
    return accelerator_from_dict(TINY, "test tiny")


def tiny_model(extra: tuple[Layer, ...] = ()) -> ModelImport:
    layers = (
        Layer(gemm("mm", m=2, n=4, k=2), ("mm", "mm_again", "mm_third"), "MatMul"),
        Layer(dense("fc", n=1, c=2, k=6), ("fc",), "Gemm"),
        Layer(conv2d("conv", n=1, c=1, h=1, w=3, k=2, r=1, s=2), ("conv",), "Conv"),
    ) + extra
    return ModelImport("tinynet", "test", layers)


def _values(mm):
    return [l.result.objective(mm.objective) if l.ok else None for l in mm.layers]


def test_every_layer_is_mapped_once_and_totals_count_occurrences(arch):
    mm = map_model(tiny_model(), arch, "edp", strategy="optimal", jobs=1, progress=False)
    assert [l.name for l in mm.layers] == ["mm", "fc", "conv"]
    assert [l.count for l in mm.layers] == [3, 1, 1]
    assert all(l.ok and l.proven_optimal and not l.cached for l in mm.layers)
    assert mm.searched == 3 and mm.cache_hits == 0
    # Each layer's mapping is the single-operator optimum.
    for l in mm.layers:
        alone = map_operator(l.layer.operator, arch, "edp", strategy="optimal")
        assert l.result.edp == alone.best.value
    assert mm.energy_total == sum(l.result.energy_total * l.count for l in mm.layers)
    assert mm.latency_total == sum(l.result.latency * l.count for l in mm.layers)
    assert mm.edp_total == mm.energy_total * mm.latency_total
    assert mm.macs_mapped == 3 * 16 + 12 + 8
    # The accelerator's precision is adopted: the operators were built with defaults.
    assert {o.bits for o in mm.layers[0].layer.operator.operands} == {8, 32}


def test_parallel_workers_give_the_serial_answer(arch):
    serial = map_model(tiny_model(), arch, "energy", strategy="optimal", jobs=1, progress=False)
    parallel = map_model(tiny_model(), arch, "energy", strategy="optimal", jobs=2, progress=False)
    assert _values(serial) == _values(parallel)
    assert [l.name for l in parallel.layers] == ["mm", "fc", "conv"]


def test_second_run_is_served_from_the_cache_without_searching(arch, tmp_path, monkeypatch):
    cache = tmp_path / "c.sqlite"
    first = map_model(tiny_model(), arch, "edp", strategy="optimal", jobs=1, cache_path=cache, progress=False)

    def no_search(*a, **k):
        raise AssertionError("searched although every layer is cached")

    monkeypatch.setattr(layer_pool, "map_operator", no_search)
    second = map_model(tiny_model(), arch, "edp", strategy="optimal", jobs=1, cache_path=cache, progress=False)
    assert second.searched == 0 and second.cache_hits == 3
    assert all(l.cached and l.proven_optimal for l in second.layers)
    assert _values(second) == _values(first)
    assert [l.mapping for l in second.layers] == [l.mapping for l in first.layers]


def test_cache_key_separates_objective_and_accelerator(arch, tmp_path):
    cache = tmp_path / "c.sqlite"
    map_model(tiny_model(), arch, "edp", strategy="optimal", jobs=1, cache_path=cache, progress=False)
    other = map_model(tiny_model(), arch, "latency", strategy="optimal", jobs=1, cache_path=cache, progress=False)
    assert other.cache_hits == 0
    bigger = accelerator_from_dict({**TINY, "levels": [TINY["levels"][0], {**TINY["levels"][1], "capacity": "512 B"},
                                                        TINY["levels"][2]]}, "bigger")
    renamed = map_model(tiny_model(), bigger, "edp", strategy="optimal", jobs=1, cache_path=cache, progress=False)
    assert renamed.cache_hits == 0
    # Same content under another name is the same accelerator.
    same = accelerator_from_dict({**TINY, "name": "tiny_again"}, "renamed")
    again = map_model(tiny_model(), same, "edp", strategy="optimal", jobs=1, cache_path=cache, progress=False)
    assert again.cache_hits == 3 and again.layers[0].result.accelerator == "tiny_again"


def test_a_stale_cache_row_is_searched_again(arch, tmp_path):
    cache = tmp_path / "c.sqlite"
    first = map_model(tiny_model(), arch, "edp", strategy="optimal", jobs=1, cache_path=cache, progress=False)
    with sqlite3.connect(cache) as db:
        db.execute("UPDATE results SET value = value * 2 WHERE operator = 'fc'")
    second = map_model(tiny_model(), arch, "edp", strategy="optimal", jobs=1, cache_path=cache, progress=False)
    assert [l.cached for l in second.layers] == [True, False, True]
    assert _values(second) == _values(first)


def test_an_interrupted_sweep_resumes_where_it_stopped(arch, tmp_path, monkeypatch):
    cache = tmp_path / "c.sqlite"
    calls = []

    def interrupt_second(op, *a, **k):
        calls.append(op.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return map_operator(op, *a, **k)

    monkeypatch.setattr(layer_pool, "map_operator", interrupt_second)
    with pytest.raises(KeyboardInterrupt):
        map_model(tiny_model(), arch, "edp", strategy="optimal", jobs=1, cache_path=cache, progress=False)
    finished = calls[0]
    calls.clear()
    monkeypatch.setattr(layer_pool, "map_operator", lambda op, *a, **k: calls.append(op.name) or
                        map_operator(op, *a, **k))
    resumed = map_model(tiny_model(), arch, "edp", strategy="optimal", jobs=1, cache_path=cache, progress=False)
    assert finished not in calls and len(calls) == 2
    assert resumed.cache_hits == 1 and [l.name for l in resumed.layers if l.cached] == [finished]
    assert all(l.ok for l in resumed.layers)


def test_an_unmappable_layer_is_reported_and_the_others_are_mapped(arch, tmp_path):
    four_bit = Layer(gemm("mm4", m=2, n=2, k=2, bits={"I": 4, "W": 4, "O": 16}), ("mm4",), "MatMul")
    model = tiny_model((four_bit,))
    mm = map_model(model, arch, "edp", strategy="optimal", jobs=1, keep_precision=True,
                   cache_path=tmp_path / "c.sqlite", progress=False)
    bad = [l for l in mm.layers if not l.ok]
    assert [l.name for l in bad] == ["mm4"]
    assert "16-bit, but tiny computes class O at 32 bits" in bad[0].error
    assert len(mm.mapped) == 3
    assert mm.to_dict()["failed_layers"] == ["mm4"]
    # Totals cover the mapped layers only.
    assert mm.energy_total == sum(l.result.energy_total * l.count for l in mm.mapped)
    # The failure is deterministic, so it is cached like a result.
    again = map_model(model, arch, "edp", strategy="optimal", jobs=1, keep_precision=True,
                      cache_path=tmp_path / "c.sqlite", progress=False)
    assert again.cache_hits == 4 and again.layers[3].error == bad[0].error


def test_a_buffer_too_small_for_any_tile_is_a_layer_error():
    levels = [dict(lv) for lv in TINY["levels"]]
    levels[2] = {**levels[2], "capacity": "1 words", "holds": ["W", "O"]}   # O is 32-bit: never fits 8 bits
    arch = accelerator_from_dict({**TINY, "levels": levels}, "starved")
    mm = map_model(tiny_model(), arch, "edp", strategy="optimal", jobs=1, progress=False)
    assert not mm.mapped and len(mm.failed) == 3
    assert all(l.error for l in mm.failed)


def test_model_wide_spatial_constraints_are_fitted_per_layer_with_notes():
    op = conv2d("c", n=1, c=3, h=4, w=4, k=6, r=1, s=1)
    cons, notes = fit_constraints(Constraints(spatial={"X": {"K": 4, "C": 2, "M": 2}}), op)
    # K indexes the output: padded to whole rounds (6 -> 8); C is reduced: largest divisor of 3 within 2.
    assert cons.spatial == {"X": {"K": 4, "C": 1}}
    assert notes == ("constraint X: K=4 pads K=6 to 8", "constraint X: C=2 unrolls C=1 (C is 3)",
                     "constraint X: M=2 dropped (no dimension M)")
    small, _ = fit_constraints(Constraints(spatial={"X": {"K": 8}}), op)
    assert small.spatial == {"X": {"K": 6}}
    same, none = fit_constraints(Constraints(spatial={"X": {"K": 2}}), op)
    assert same.spatial == {"X": {"K": 2}} and none == ()


def test_constraints_must_name_real_axes_and_dims(arch):
    with pytest.raises(SpecError, match="unknown fan-out axis 'Z'"):
        map_model(tiny_model(), arch, constraints=Constraints(spatial={"Z": {"K": 2}}), progress=False)
    with pytest.raises(SpecError, match="no layer of tinynet has a dimension 'H'"):
        map_model(tiny_model(), arch, constraints=Constraints(spatial={"X": {"H": 2}}), progress=False)
    with pytest.raises(SpecError, match="unknown objective"):
        map_model(tiny_model(), arch, "fastest", progress=False)


def test_spatial_constraints_are_obeyed(arch):
    mm = map_model(tiny_model(), arch, "edp", strategy="optimal", jobs=1, progress=False,
                   constraints=Constraints(spatial={"Y": {"K": 2}}))
    for l in mm.layers:
        op = l.layer.operator
        if "K" in op.sizes:
            on_y = [(lp.dim, lp.bound) for lp in l.mapping.loops if lp.axis == "Y"]
            if "K" in op.output.dims:
                assert on_y == [("K", 2)]
            else:
                # The GEMM reduces over its K, and Y cannot add partial sums: the constraint is dropped.
                assert on_y == [] or all(d != "K" for d, _ in on_y)
                assert any("Y cannot reduce" in n for n in l.notes)


def test_pareto_model_front_is_every_non_dominated_sum_of_layer_points(arch, tmp_path):
    import itertools

    mm = map_model(tiny_model(), arch, "pareto", strategy="exhaustive", jobs=1, progress=False,
                   cache_path=tmp_path / "c.sqlite")
    assert all(l.ok and l.front for l in mm.layers)
    # Brute force: every choice of one front point per layer, summed over occurrences.
    sums = []
    for pick in itertools.product(*(range(len(l.front)) for l in mm.layers)):
        e = sum(l.front[j][0].energy_total * l.count for l, j in zip(mm.layers, pick))
        t = sum(l.front[j][0].latency * l.count for l, j in zip(mm.layers, pick))
        sums.append((e, t))
    expected = sorted((e, t) for e, t in sums if not any(e2 <= e and t2 <= t and (e2, t2) != (e, t)
                                                         for e2, t2 in sums))
    got = [(e, t) for e, t, _ in mm.front()]
    assert len(got) == len(set(expected)) and all(
        abs(a[0] - b[0]) <= 1e-9 * b[0] and abs(a[1] - b[1]) <= 1e-9 * b[1] for a, b in zip(got, sorted(set(expected))))
    # Each layer's front is the exhaustive front, and comes back the same from the cache.
    for l in mm.layers:
        ex = map_operator(l.layer.operator, arch, "pareto", strategy="exhaustive")
        assert sorted((f.result.energy_total, f.result.latency) for f in ex.results) == \
            sorted((r.energy_total, r.latency) for r, _ in l.front)
    again = map_model(tiny_model(), arch, "pareto", strategy="exhaustive", jobs=1, progress=False,
                      cache_path=tmp_path / "c.sqlite")
    assert again.cache_hits == len(again.layers)
    assert [(e, t) for e, t, _ in again.front()] == got


def test_an_infeasible_layer_is_proven_at_once_and_named(arch):
    # Reg cannot be bypassed and holds 16 one-byte words: a 32-bit output element fits, but the
    # outermost level is unbounded, so make Buf the outermost by a one-level machine instead.
    small = dict(TINY, levels=[dict(TINY["levels"][1], capacity="16 B", fanout=None)])
    small["levels"][0].pop("fanout")
    tiny_top = accelerator_from_dict(small, "test small")
    from accelmap.errors import MappingError
    with pytest.raises(MappingError, match=r"level Buf must hold whole operands \(it is the outermost level\)"):
        map_operator(gemm("g", m=4, n=4, k=4), tiny_top, "edp")


def test_running_out_of_time_is_not_reported_as_infeasible(arch):
    op = conv2d("c", n=1, c=8, h=8, w=8, k=8, r=3, s=3)
    res = map_operator(op, arch, "edp", strategy="exhaustive", time_limit=0.05)
    assert res.timed_out and not res.proven_optimal
    text = " ".join(res.notes)
    assert "time limit 0.05 s reached" in text and "overflowed" not in text


def test_certificate_gap_and_proof(arch):
    op = gemm("g", m=2, n=2, k=2)
    exact = map_operator(op, arch, "edp", strategy="optimal")
    assert exact.proven_optimal and exact.gap == 0.0
    assert exact.lower_bound is not None and exact.lower_bound <= exact.best.value * (1 + 1e-12)
    heur = map_operator(op, arch, "edp", strategy="heuristic", time_limit=5)
    # The bound is a property of the operator, machine and constraints, not of the search.
    assert heur.lower_bound == exact.lower_bound
    assert heur.best.value >= exact.best.value * (1 - 1e-12)
    assert heur.gap == (0.0 if heur.proven_optimal else heur.best.value / heur.lower_bound - 1)


def test_the_heuristic_config_is_part_of_the_cache_key(arch, tmp_path):
    from accelmap.search.heuristic_config import HeuristicConfig

    cache = tmp_path / "c.sqlite"
    run = dict(strategy="heuristic", jobs=1, cache_path=cache, progress=False)
    map_model(tiny_model(), arch, "edp", **run)
    assert map_model(tiny_model(), arch, "edp", heuristic_config=HeuristicConfig(), **run).cache_hits == 3
    fewer = HeuristicConfig(climbs=1, random_tilings=10)
    other = map_model(tiny_model(), arch, "edp", heuristic_config=fewer, **run)
    assert other.cache_hits == 0 and other.searched == 3
    assert map_model(tiny_model(), arch, "edp", heuristic_config=fewer, **run).cache_hits == 3


def test_a_heuristic_config_out_of_range_is_refused():
    from accelmap.search.heuristic_config import HeuristicConfig

    with pytest.raises(ValueError, match="HeuristicConfig.climbs must be an integer >= 1, got 0"):
        HeuristicConfig(climbs=0)
    with pytest.raises(ValueError, match="probe_share"):
        HeuristicConfig(probe_share=0.0)
    assert HeuristicConfig(greedy_unrollings=0).key() != HeuristicConfig().key()
