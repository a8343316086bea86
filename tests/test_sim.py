"""Simulator: hand-checked timelines, seed 003's worked example, functional results, model agreement."""

from __future__ import annotations

import math

from pathlib import Path

import pytest
from click.testing import CliRunner

from accelmap.arch import accelerator_from_dict, get_accelerator
from accelmap.cli import main
from accelmap.cost import access_counts, evaluate
from accelmap.cost.latency import latency_terms
from accelmap.examples import example_path
from accelmap.mapping import parse_text, validate
from accelmap.sim import simulate
from accelmap.workload import conv2d, gemm
from accelmap.examples import example_path


def _tiny(double_buffered: bool, setup: int = 10):
    return accelerator_from_dict({"name": "tiny", "compute": {"mac_energy": "1 pJ"}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit",
         "read_bandwidth": "1 words/cycle"},
        {"name": "Buf", "holds": ["I", "W", "O"], "capacity": "1 KB", "width": "8 bit",
         "double_buffered": double_buffered, "transfer_setup_cycles": setup}]})


TINY_MAP = "DRAM [ O A B ]\n| for M in [0:2)\nBuf [ O A B ]\n| for M in [0:2)\n| for K in [0:2)\n"


@pytest.mark.parametrize("double_buffered, cycles", [(False, 70), (True, 66)])
def test_hand_checked_timeline(double_buffered, cycles):
    # O[m,n] += A[m,k] * B[k,n], M=4 N=1 K=2; two steps of 4 MACs. DRAM moves 8 bits per cycle,
    # each transfer costs 10 setup cycles. Step 0: load A (4 B: 14) then B (2 B: 12) -> 26,
    # compute 4 -> 30. Step 1: drain O tile 0 (2 x int32: 18) and load A tile 1 (14) in
    # parallel; single-buffered, A waits for compute 0 (30 -> 44) and compute 1 for the drain
    # (48 -> 52); double-buffered, A loads at 26 -> 40 and compute 1 runs 40 -> 44 while the
    # drain runs 30 -> 48. The last drain ends the run: 52 + 18 = 70, or 48 + 18 = 66.
    a = _tiny(double_buffered)
    op = gemm("g", m=4, n=1, k=2)
    m = parse_text(TINY_MAP, a)
    res = simulate(op, a, m)
    assert res.cycles == cycles
    assert res.timing.busy["compute"] == 8
    assert res.timing.busy["load Buf"] == 14 + 12 + 14
    assert res.timing.busy["store Buf"] == 2 * 18
    assert res.functional is True
    # the analytical model stays within 10% of the simulator on this edge-dominated case
    assert abs(res.model_error) <= 0.10


def test_setup_cycles_are_charged_per_transfer():
    op = gemm("g", m=4, n=1, k=2)
    slow, fast = _tiny(False, 10), _tiny(False, 0)
    m = parse_text(TINY_MAP, slow)
    # without setup: loads 4 + 2, compute 6-10, drain 10-18 (A tile 1 loads 10-14 beside it),
    # compute 18-22, drain 22-30. The critical path holds 4 transfers (A0, B, both drains): +40
    assert simulate(op, fast, m, functional=False).cycles == 30
    assert simulate(op, slow, m, functional=False).cycles == 70




def test_seed003_set_a_l1_compute_cycles():
    """Seed 003, Eq. 4.1: 192 result sets x (16 + 2*16 + 23) = 13,632 cycles against an ideal 3,072."""
    arch = get_accelerator("diana_like")
    op = conv2d("setA_L1", c=16, h=16, w=48, k=64, r=1, s=1, bits={"I": 8, "W": 8, "O": 32})
    m = parse_text(Path(example_path("diana_setA_L1.mapping.txt")).read_text(), arch, "diana_setA_L1.mapping.txt")
    validate(op, arch, m)
    terms = latency_terms(op, arch, m, access_counts(op, arch, m))
    assert terms.compute_cycles == op.macs // 256 == 3072
    assert terms.compute_cycles + terms.pipeline_cycles == 13632
    res = simulate(op, arch, m, functional=False)
    assert res.timing.busy["compute"] == 13632
    assert abs(res.model_error) < 0.05


def test_functional_result_on_every_preset_family():
    op = conv2d("c", c=8, h=6, w=6, k=16, r=3, s=3, padding=1, bits={"I": 8, "W": 8, "O": 32})
    arch = get_accelerator("tpu_like")
    m = parse_text("""DRAM [ O I W ]
UB [ O I W ]
| for K in [0:2)
| for R in [0:3)
| for S in [0:3)
| spatial-for C in [0:8) @X
| spatial-for K in [0:8) @Y
PEReg [ W ]
| for P in [0:6)
| for Q in [0:6)
""", arch)
    res = simulate(op, arch, m)
    assert res.functional is True
    r = evaluate(op, arch, m)
    assert res.cycles >= r.compute_cycles
    assert all(0 <= u <= 1 for u in res.timing.utilization().values())
    assert max(res.timing.port_busy.values()) <= res.cycles
    assert abs(res.model_error) < 0.15


def test_cli_simulate_writes_timeline(tmp_path):
    png = tmp_path / "t.png"
    r = CliRunner().invoke(main, ["simulate", "-w", example_path("conv_small.yaml"), "-a", "eyeriss_like",
                                  "-m", example_path("conv_small.eyeriss_like.mapping.yaml"), "--timeline", str(png)])
    assert r.exit_code == 0, r.output
    assert "output equal to NumPy" in r.output and "transfer counts equal to the model" in r.output
    assert png.stat().st_size > 1000


def _tiny_rw(double_buffered: bool = False):
    return accelerator_from_dict({"name": "tiny_rw", "compute": {"mac_energy": "1 pJ"}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit",
         "read_bandwidth": "1 words/cycle", "write_bandwidth": "1 words/cycle"},
        {"name": "Buf", "holds": ["I", "W", "O"], "capacity": "1 KB", "width": "8 bit",
         "double_buffered": double_buffered}]})


def test_single_buffer_stall_is_timed_per_transition_class():
    # O[m,n] += A[m,k] * B[k,n], M=2 N=1 K=4, one MAC per step. A K step moves A and B (1 cycle
    # each, one load unit): 2 cycles. An M step also drains the int32 O (4 cycles, store unit),
    # which the next MAC waits for: 4 cycles, not the average of the drains over all steps.
    # 8 MACs + first loads 2 + 6 K steps x 2 + 1 M step x 4 + last drain 4 = 30.
    a = _tiny_rw()
    op = gemm("g", m=2, n=1, k=4)
    m = parse_text("DRAM [ O A B ]\n| for M in [0:2)\n| for K in [0:4)\nBuf [ O A B ]\n", a)
    res = simulate(op, a, m)
    assert res.cycles == 30
    assert res.model_latency == 30
    assert res.functional is True


def test_prefetch_fills_port_gaps_instead_of_queueing_behind_later_loads():
    # tpu_like, UB double-buffered, weights straight from DRAM into the PE registers on the same
    # DRAM read port as the UB's input prefetch. The prefetch takes the port's free cycles from
    # the moment its buffer half is free; queued behind the weight loads issued before it in
    # program order, it would stall the array at every input tile (+35%).
    arch = get_accelerator("tpu_like")
    op = conv2d("pw", c=96, h=56, w=56, k=24, r=1, s=1, bits={"I": 8, "W": 8, "O": 32})
    m = parse_text("""DRAM [ O I W ]
| for Q in [0:14)
| for C in [0:3)
UB [ O I ]
| for K in [0:3)
| for P in [0:14)
| for Q in [0:4)
| spatial-for C in [0:32) @X
| spatial-for K in [0:8) @Y
| spatial-for P in [0:4) @Y
PEReg [ W ]
""", arch)
    res = simulate(op, arch, m, functional=False)
    # bound by the UB read port: streaming to the array plus the drains to DRAM
    assert res.cycles == pytest.approx(res.timing.port_busy["UB.read"], rel=1e-9)
    assert res.model_error == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("preset", ["eyeriss_like", "tpu_like", "vta_like", "diana_like"])
def test_steady_state_skip_changes_nothing(preset):
    import random

    from accelmap.mapping.sampling import random_mapping
    from accelmap.sim import build_program, run_timing

    arch = get_accelerator(preset)
    op = conv2d("c", c=16, h=10, w=10, k=16, r=3, s=3, padding=1, bits={"I": 8, "W": 8, "O": 8 if preset == "diana_like" else 32})
    if preset == "eyeriss_like":
        op = conv2d("c", c=16, h=10, w=10, k=16, r=3, s=3, padding=1, bits={"I": 16, "W": 16, "O": 16})
    rng = random.Random(7)
    skipped = tried = 0
    while tried < 6:
        m = random_mapping(op, arch, rng, imperfect=rng.random() < 0.3, check_fit=True)
        # steps = temporal iterations above the deepest level that receives tiles: keep them few
        deepest = max(i for X in op.operands for i in range(1, len(arch.levels))
                      if X.name in m.keep[i] and any(X.name in m.keep[p] for p in range(i)))
        if math.prod(l.bound for l in m.loops if not l.spatial and l.level < deepest) > 3000:
            continue
        tried += 1
        prog = build_program(op, arch, m)
        full, fast = run_timing(prog, 0, skip=False), run_timing(prog, 0, skip=True)
        assert fast.cycles == pytest.approx(full.cycles, rel=1e-9)
        assert fast.instructions == full.instructions
        for u, b in full.busy.items():
            assert fast.busy[u] == pytest.approx(b, rel=1e-9, abs=1e-6)
        for p, b in full.port_busy.items():
            assert fast.port_busy[p] == pytest.approx(b, rel=1e-9, abs=1e-6)
        skipped += fast.skipped_steps
    assert skipped > 0


def test_one_step_program():
    # every loop inside the buffer: one step, one load of each tile, one drain
    a = _tiny_rw()
    op = gemm("g", m=4, n=1, k=2)
    m = parse_text("DRAM [ O A B ]\nBuf [ O A B ]\n| for M in [0:4)\n| for K in [0:2)\n", a)
    res = simulate(op, a, m)
    # loads A (8 B) and B (2 B) at 1 B/cycle, 8 MACs, drain 4 x int32 = 16 B
    assert res.program.n_steps == 1
    assert res.cycles == 8 + 2 + 8 + 16
    assert res.model_latency == res.cycles
    assert res.functional is True
