"""One port for a level's reads and writes (``Level.shared_port``): the latency model and the simulator serialize
them on it, and agree; refused where the model cannot schedule it; a layer alone under fusion's one off-chip port
is timed by that schedule."""

from __future__ import annotations

import random
from dataclasses import replace

import onnx
import pytest

from accelmap.arch import accelerator_from_dict, get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost import evaluate
from accelmap.cost.latency import shared_port_crossings
from accelmap.errors import SpecError
from accelmap.fusion.model_fusion import fuse_model
from accelmap.fusion.search import FusionConfig
from accelmap.mapping import parse_text
from accelmap.mapping.sampling import random_mapping
from accelmap.search.model_mapper import map_model
from accelmap.sim import simulate
from accelmap.workload import conv2d, gemm
from accelmap.workload.models.bundled import load_model
from onnx_graphs import F, graph_model, node, weight


def _tiny(shared: bool, double_buffered: bool = False, write_bw: str = "1 words/cycle"):
    return accelerator_from_dict({"name": "tiny_port", "compute": {"mac_energy": "1 pJ"}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit",
         "read_bandwidth": "1 words/cycle", "write_bandwidth": write_bw, "shared_port": shared},
        {"name": "Buf", "holds": ["I", "W", "O"], "capacity": "1 KB", "width": "8 bit",
         "double_buffered": double_buffered}]})


def _one_port(arch):
    levels = (replace(arch.levels[0], shared_port=True),) + arch.levels[1:]
    return replace(arch, levels=levels)


def test_hand_checked_drain_and_loads_take_turns():
    # O[m,n] += A[m,k] * B[k,n], M=2 N=1 K=4, one MAC per step, single-buffered. A K step loads A and B (1 cycle
    # each). At the M step the int32 O drains (4 cycles) and the next A and B load: on a port each they overlap (4
    # cycles), on one port they take turns (4 + 2 = 6). 8 MACs + first loads 2 + 6 K steps x 2 + the M step + last
    # drain 4: 30 on two ports, 32 on one.
    op = gemm("g", m=2, n=1, k=4)
    text = "DRAM [ O A B ]\n| for M in [0:2)\n| for K in [0:4)\nBuf [ O A B ]\n"
    got = {}
    for shared in (False, True):
        a = _tiny(shared)
        res = simulate(op, a, parse_text(text, a))
        assert res.model_latency == res.cycles
        got[shared] = res
    assert got[False].cycles == 30 and got[True].cycles == 32
    assert got[True].timing.port_busy == {"DRAM.port": 24.0, "Buf.write": 0.0, "Buf.read": 0.0}
    assert got[True].functional is True


def test_refused_where_the_bandwidths_differ():
    with pytest.raises(SpecError, match=r"levels\[0\]\.shared_port: one port for reads and writes needs DRAM's read "
                                        r"and write bandwidths equal \(the port's\), got 8.0 and 16.0 bits per cycle"):
        _tiny(True, write_bw="2 words/cycle")


def test_hand_checked_double_buffer_on_one_port():
    # Buf double-buffered under DRAM's one port, O[m,n] += A[m,k] * B[k,n], M=2 N=1 K=2x2, a step of one MAC. Every
    # step loads A and B (1 cycle each); each K=2 pass reloads O (2 cycles) and drains it (4). By hand on one port:
    # loads 0-4, step 0 4-5; A1 B1 4-6, step 1 6-7; the drain of O0 takes the port at 7-11, so B2 (issued at 7) ends
    # at 12 and the reload of O1 at 14, step 2 14-15; the same every pass (10 cycles), the last drain 37-41.
    op = gemm("g", m=2, n=1, k=4)
    text = "DRAM [ O A B ]\n| for K in [0:2)\n| for M in [0:2)\n| for K in [0:2)\nBuf [ O A B ]\n"
    a = _tiny(True, double_buffered=True)
    res = simulate(op, a, parse_text(text, a))
    assert res.cycles == 41.0
    assert res.timing.port_busy["DRAM.port"] == 40.0
    # the model: the port's total, one cycle short (the last drain waits for the last step, which waits for its
    # loads: the windows count loads against loads on the port, not the drain issued between them)
    assert res.model_latency == 40.0
    assert res.functional is True


@pytest.mark.parametrize("preset", ["tpu_like", "vta_like"])
def test_one_port_above_double_buffers(preset):
    # Random mappings with the off-chip level on one port above a double-buffered level: the model's latency is at
    # least its two-port latency (the argument for the mapper's bounds, docs/mapper.md), energy unchanged; where
    # only inputs or only the output of the double buffer cross the one port, and the two-port model is the
    # two-port run, the model is the simulated run. (Where both cross it, it can be below: docs/cost-model.md.)
    arch = get_accelerator(preset)
    one = _one_port(arch)
    rng = random.Random(5)
    exact = crossing_both = 0
    for i in range(16):
        op = gemm(m=rng.randrange(4, 48), n=rng.randrange(4, 48), k=rng.randrange(4, 48)) if i % 2 else \
            conv2d(c=rng.randrange(2, 12), k=rng.randrange(2, 12), h=8, w=8, r=3, s=3)
        op = adopt_precision(op, arch)
        m = random_mapping(op, one, rng, check_fit=True, imperfect=i % 3 == 0)
        r1, r2 = evaluate(op, one, m), evaluate(op, arch, m)
        assert r1.latency >= r2.latency * (1 - 1e-12), (preset, m)
        assert r1.energy_total == r2.energy_total
        if shared_port_crossings(op, one, m) == {"input", "output"}:
            crossing_both += 1
            continue
        if r2.latency == pytest.approx(simulate(op, arch, m, functional=False).cycles, rel=1e-9):
            assert r1.latency == pytest.approx(simulate(op, one, m, functional=False).cycles, rel=1e-9), (preset, m)
            exact += 1
    assert exact >= 3 and crossing_both >= 3, (exact, crossing_both)


@pytest.mark.parametrize("preset", ["eyeriss_like", "simba_like", "edge_tpu_like"])
def test_model_equals_simulator_on_one_port(preset):
    # Random mappings of small products and convolutions with the off-chip level's reads and writes on one port: the
    # model's latency is the simulated run, at least the two-port one, and at least the port's bits over it.
    arch = get_accelerator(preset)
    one = _one_port(arch)
    rng = random.Random(7)
    checked = 0
    for i in range(12):
        op = gemm(m=rng.randrange(4, 48), n=rng.randrange(4, 48), k=rng.randrange(4, 48)) if i % 2 else \
            conv2d(c=rng.randrange(2, 12), k=rng.randrange(2, 12), h=8, w=8, r=3, s=3)
        op = adopt_precision(op, arch)
        m = random_mapping(op, one, rng, check_fit=True)
        r1, r2 = evaluate(op, one, m), evaluate(op, arch, m)
        sim = simulate(op, one, m, functional=False)
        assert r1.latency == pytest.approx(sim.cycles, rel=1e-9), (preset, m)
        assert r1.latency >= r2.latency - 1e-9
        assert r1.latency >= sim.timing.port_busy.get("DRAM.port", 0.0) - 1e-9
        assert r1.energy_total == r2.energy_total
        checked += 1
    assert checked == 12


def test_fused_model_times_a_layer_alone_on_its_one_port(tmp_path):
    # eyeriss_like (single-buffered): with one off-chip port a layer alone is its mapping's schedule on that port,
    # not the larger of its two-port time and its bits over the port.
    p = tmp_path / "mm.onnx"
    onnx.save(graph_model([node("MatMul", ["x", "w"], ["y"])], [("x", F, [64, 32])], [("y", F, [64, 64])],
                          [weight("w", [32, 64])]), p)
    arch = get_accelerator("eyeriss_like")
    mm = map_model(load_model(p), arch, "edp", strategy="random", time_limit_per_layer=600, jobs=1, progress=False)
    (lm,) = mm.layers
    fm = fuse_model(mm, config=FusionConfig(shared_offchip_port=True), time_limit=1e-9)
    one = evaluate(lm.layer.operator, _one_port(arch), lm.mapping).latency
    assert fm.unfused.latency == one
    assert one >= lm.result.latency
    assert any("a layer alone is its mapping's schedule" in n for n in fm.notes)


def test_lower_bounds_stay_below_the_cost_on_one_port():
    # The mapper's bounds are derived for a port each way; on one port every transfer takes at least as long, so
    # they stay below the cost: the partial bounds of random mappings' levels and the spatial bound.
    from accelmap.errors import MappingError
    from accelmap.search.bounds import BoundContext, chain_options
    from accelmap.search.space import Constraints, keep_options
    from accelmap.search.spatial import spatial_lower_bound
    from strategies import random_operator

    rng = random.Random(11)
    checked = 0
    presets = ("eyeriss_like", "simba_like", "edge_tpu_like", "tpu_like", "vta_like")
    for n in range(75):
        arch = _one_port(get_accelerator(presets[n % 5]))
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30, imperfect=bool(n % 2))
        except MappingError:
            continue
        res = evaluate(op, arch, m)
        ctx = BoundContext(op, arch, m.keep)
        for level in range(len(arch.levels)) if n % 2 == 0 else ():
            fixed = tuple(l for l in m.loops if l.level >= level)
            rem = dict(op.sizes)
            for l in fixed:
                rem[l.dim] //= l.bound
            e_lb, l_lb = ctx.lower_bound(fixed, level, rem)
            assert e_lb <= res.energy_total * (1 + 1e-12) and l_lb <= res.latency * (1 + 1e-12), (arch.name, m)
        every = chain_options(op, keep_options(op, arch, Constraints()))
        e_lb, l_lb = spatial_lower_bound(op, arch, tuple(l for l in m.loops if l.spatial), every)
        assert e_lb <= res.energy_total * (1 + 1e-12) and l_lb <= res.latency * (1 + 1e-12), (arch.name, m)
        checked += 1
    assert checked > 35


@pytest.mark.parametrize("preset", ["eyeriss_like", "simba_like", "tpu_like"])
def test_pruned_search_equals_exhaustive_on_one_port(preset):
    from accelmap.search import search_exhaustive, search_optimal, space_size
    from strategies import random_operator

    arch = _one_port(get_accelerator(preset))
    rng = random.Random(3)
    # tpu_like (its unified buffer double-buffered under the one port): smaller spaces, for the test's time
    largest = 800 if preset == "tpu_like" else 3000
    done = 0
    while done < 3:
        op = adopt_precision(random_operator(rng), arch)
        if op.macs > 96 or space_size(op, arch) > largest:
            continue
        front, _ = search_exhaustive(op, arch, "pareto")
        for objective, f in (("latency", lambda r: r.latency), ("edp", lambda r: r.energy_total * r.latency)):
            pr, _ = search_optimal(op, arch, objective)
            assert bool(front) == bool(pr)
            if front:
                assert min(f(x.result) for x in front) == pytest.approx(pr[0].value, rel=1e-12)
        done += 1


@pytest.mark.parametrize("seed, both", [(0, False), (1, True)])
def test_fused_model_says_where_a_layer_alone_crosses_one_port_both_ways(tmp_path, seed, both):
    # tpu_like's unified buffer is double-buffered: a layer alone whose mapping moves the buffer's inputs and its
    # output through the one off-chip port is timed by the model, which can be below the simulator there: said.
    p = tmp_path / "mm.onnx"
    onnx.save(graph_model([node("MatMul", ["x", "w"], ["y"])], [("x", F, [64, 32])], [("y", F, [64, 64])],
                          [weight("w", [32, 64])]), p)
    arch = get_accelerator("tpu_like")
    mm = map_model(load_model(p), arch, "edp", strategy="random", time_limit_per_layer=600, jobs=1, progress=False,
                   seed=seed)
    (lm,) = mm.layers
    crossing = shared_port_crossings(lm.layer.operator, _one_port(arch), lm.mapping)
    assert crossing == ({"input", "output"} if both else {"input"})
    fm = fuse_model(mm, config=FusionConfig(shared_offchip_port=True), time_limit=1e-9)
    assert fm.unfused.latency == evaluate(lm.layer.operator, _one_port(arch), lm.mapping).latency
    said = [n for n in fm.notes if "move both inputs and the output of a double-buffered level" in n]
    assert said == ([f"1 layer(s) alone ({lm.layer.name}) move both inputs and the output of a double-buffered level "
                     "through the one off-chip port: there the latency model can be below the simulator's schedule "
                     "(it counts that level's loads, not its drains, against each other on the port)"] if both else [])


@pytest.mark.parametrize("seed, both", [(0, False), (1, True)])
def test_mapper_says_where_its_best_mapping_crosses_one_port_both_ways(seed, both):
    # The format accepts one port above a double buffer, but where the best mapping moves that buffer's inputs and its
    # output through it the model can be below the simulator: the layer's notes say so (and only then).
    from accelmap.search.mapper import map_operator

    arch = get_accelerator("tpu_like")
    op = adopt_precision(gemm("mm", m=64, n=64, k=32), arch)
    res = map_operator(op, _one_port(arch), "edp", strategy="random", time_limit=600, seed=seed)
    assert shared_port_crossings(op, _one_port(arch), res.best.mapping) == ({"input", "output"} if both else {"input"})
    said = [n for n in res.notes if "through one shared port" in n]
    assert said == (["the best mapping moves a double-buffered level's inputs and its output through one shared port: "
                     "the model's latency can be below the simulator's there (accelmap simulate runs it)"] if both
                    else [])
