"""Tiles streamed in during compute (``stream_single_tile``) against tiles loaded whole before it:
the simulator's cycles on small cases, derived by hand, and the model equal to them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from accelmap.arch import accelerator_from_dict
from accelmap.errors import SpecError
from accelmap.mapping import parse_text
from accelmap.sim import simulate
from accelmap.workload import gemm


def _arch(stream: bool, big_buffering=True, reg: dict | None = None, big_write="1 words/cycle"):
    # B (the W operand) goes DRAM -> Big (1 word/cycle write port, one tile for the whole run) -> Reg;
    # A goes DRAM -> Big and is read by the compute from there; C accumulates in DRAM.
    return accelerator_from_dict({"name": "streamed", "compute": {"mac_energy": "1 pJ"}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit"},
        {"name": "Big", "holds": ["W", "I"], "capacity": "1 KB", "width": "8 bit", "read_bandwidth": "unbounded",
         "write_bandwidth": big_write, "double_buffered": big_buffering, "stream_single_tile": stream},
        {"name": "Reg", "holds": ["W"], "capacity": "4 B", "width": "8 bit", "read_bandwidth": "1 words/cycle",
         **(reg if reg is not None else {"written_at_clock_edge": True})}]})


def _run(arch, m_: int):
    op = gemm("g", m=m_, n=2, k=8)
    m = parse_text(f"DRAM [ O A B ]\nBig [ A B ]\n| for N in [0:2)\n| for K in [0:8)\nReg [ B ]\n"
                   f"| for M in [0:{m_})\n", arch)
    return simulate(op, arch, m, functional=False)


@pytest.mark.parametrize("m_", [1, 3, 8])
def test_a_tile_kept_for_the_whole_run_streams_in_at_the_pace_its_child_takes_it(m_):
    # Big receives A (M x K = 8m words) and B (K x N = 16 words) once, through its 1 word/cycle write
    # port, A first. Loaded whole: 8m + 16 cycles before the first MAC, Reg's first weight (1 cycle),
    # then 16 steps of m cycles (Reg, written at the clock edge, takes each next weight from Big in
    # 1 cycle while the step runs): 24m + 17. Streamed: B arrives in 16 one-word pieces, one per tile
    # of Reg, each waited for by that tile only, so the first MAC waits for A (read by the compute
    # straight from Big, it has no level below to stream to: loaded whole), B's first piece and Reg's
    # load: 8m + 2 + 16m. The later pieces run ahead of the steps.
    loaded, streamed = _run(_arch(False), m_), _run(_arch(True), m_)
    assert loaded.cycles == 24 * m_ + 17
    assert streamed.cycles == 24 * m_ + 2
    assert loaded.model_latency == loaded.cycles
    assert streamed.model_latency == streamed.cycles


@pytest.mark.parametrize("m_", [1, 3, 8])
def test_streamed_pieces_are_paced_by_the_port_when_it_is_slower_than_compute(m_):
    # Big's write port at 2 bit/cycle: 4 cycles a word, A takes 32m, B 64. Streamed, the run ends
    # after A and either B's first piece, Reg's load and 16 steps (compute-bound) or all 16 pieces,
    # Reg's last load and one step (port-bound).
    loaded, streamed = (_run(_arch(s, big_write="2 bit/cycle"), m_) for s in (False, True))
    assert loaded.cycles == 32 * m_ + 64 + 1 + 16 * m_
    assert streamed.cycles == 32 * m_ + max(4 + 1 + 16 * m_, 64 + 1 + m_)
    assert (loaded.model_latency, streamed.model_latency) == (loaded.cycles, streamed.cycles)


@pytest.mark.parametrize("reg", [{"double_buffered": True}, {}])
def test_streaming_with_other_buffers_below_matches_the_simulator(reg):
    for stream in (False, True):
        res = _run(_arch(stream, reg=reg), 3)
        assert res.model_latency == res.cycles


def test_a_single_buffered_level_streams_when_it_keeps_one_tile_of_everything():
    # a level that never changes tiles needs no second buffer to stream them: single-buffered, it
    # streams as a double buffer does (and without the flag loads whole as one does)
    for stream in (False, True):
        single, double = _run(_arch(stream, big_buffering=False), 3), _run(_arch(stream), 3)
        assert single.cycles == double.cycles == (74 if stream else 89)
        assert single.model_latency == single.cycles


def test_stream_single_tile_must_be_a_bool():
    with pytest.raises(SpecError, match="stream_single_tile"):
        accelerator_from_dict({"name": "x", "compute": {"mac_energy": "1 pJ"}, "levels": [
            {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "stream_single_tile": "sometimes"}]})



def _acc_arch(stream: bool, dram_write: str, reg: dict):
    # C (the output) accumulates in Reg over K, and Acc keeps all of it for the whole run; DRAM's
    # write port takes the finished outputs.
    return accelerator_from_dict({"name": "drains", "compute": {"mac_energy": "1 pJ"}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit",
         "write_bandwidth": dram_write},
        {"name": "Acc", "holds": ["O"], "capacity": "1 KB", "width": "8 bit", "read_bandwidth": "unbounded",
         "double_buffered": True, "stream_single_tile": stream},
        {"name": "Reg", "holds": ["O"], "capacity": "8 B", "width": "8 bit", "read_bandwidth": "unbounded", **reg}]})


@pytest.mark.parametrize("reg", [{"written_at_clock_edge": True}, {"double_buffered": True}, {}])
@pytest.mark.parametrize("split_k, loaded, streamed", [(None, 192, 136), ("outer", 192, 164), (None, 96, 68),
                                                       ("inner", 192, 136)])
def test_a_tile_kept_for_the_whole_run_drains_in_pieces_as_outputs_finish(reg, split_k, loaded, streamed):
    # 8 outputs of 32 bits, 8 MACs each (64 one-cycle steps of compute). Loaded whole: the 256 bits
    # drain after the last MAC, 128 cycles at 2 bit/cycle (32 at 8 bit/cycle): 64 + 128 = 192.
    # Streamed: each output leaves when Reg drains it finished, a 16-cycle piece; the first leaves
    # after 8 cycles of compute, so the port is the bottleneck: 8 + 8 x 16 = 136. With K split in two
    # around the output loops, outputs finish only in the second half: the first at 36 cycles, and
    # 36 + 128 = 164. At 8 bit/cycle a piece takes 4 cycles, hidden behind the next output's 8:
    # only the last one follows compute, 64 + 4 = 68. With K split inside the output loops, Reg keeps
    # an output over two steps and drains it finished after the second: as without the split.
    a = _acc_arch(False, "8 bit/cycle" if loaded == 96 else "2 bit/cycle", reg)
    b = _acc_arch(True, "8 bit/cycle" if loaded == 96 else "2 bit/cycle", reg)
    op = gemm("g", m=2, n=4, k=8)
    text = {"outer": "DRAM [ O A B ]\nAcc [ O ]\n| for K in [0:2)\n| for N in [0:4)\n| for M in [0:2)\nReg [ O ]\n"
                     "| for K in [0:4)\n",
            "inner": "DRAM [ O A B ]\nAcc [ O ]\n| for N in [0:4)\n| for M in [0:2)\n| for K in [0:2)\nReg [ O ]\n"
                     "| for K in [0:4)\n",
            None: "DRAM [ O A B ]\nAcc [ O ]\n| for N in [0:4)\n| for M in [0:2)\nReg [ O ]\n| for K in [0:8)\n"}[split_k]
    for arch, cycles in ((a, loaded), (b, streamed)):
        res = simulate(op, arch, parse_text(text, arch), functional=False)
        assert res.cycles == cycles
        assert res.model_latency == cycles


@pytest.mark.parametrize("read, loaded, streamed", [("2 bit/cycle", 256, 180), ("4 bit/cycle", 176, 124),
                                                    ("8 bit/cycle", 136, 96)])
def test_outputs_that_finish_late_wait_for_the_loads_before_them(read, loaded, streamed):
    # Big keeps A (8 words, loaded whole: read by the compute from Big), B (32 words, streamed in 8
    # pieces at Reg's tiles) and C (4 outputs of 32 bits, streamed out at 2 bit/cycle, 16 cycles each)
    # for the whole run. K is split around N, so outputs finish from the fifth of 8 steps (4 cycles
    # each) on, and that step needs B's fifth piece. At 4 bit/cycle (A 16 cycles, a piece 8): the fifth
    # piece arrives at 16 + 40 = 56, Reg's load and the step end at 61, and the four drains take
    # 64 cycles more: 124 (the model took 5/8 of the run's compute for the first finished output:
    # 108, before it counted the loads that step needs).
    def arch(stream):
        return accelerator_from_dict({"name": "late", "compute": {"mac_energy": "1 pJ"}, "levels": [
            {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit",
             "read_bandwidth": read, "write_bandwidth": "2 bit/cycle"},
            {"name": "Big", "holds": ["I", "W", "O"], "capacity": "1 KB", "width": "8 bit",
             "read_bandwidth": "unbounded", "double_buffered": True, "stream_single_tile": stream},
            {"name": "Reg", "holds": ["W", "O"], "capacity": "8 B", "width": "8 bit", "read_bandwidth": "unbounded",
             "written_at_clock_edge": True}]})
    op = gemm("g", m=1, n=4, k=8)
    for stream, cycles in ((False, loaded), (True, streamed)):
        a = arch(stream)
        m = parse_text("DRAM [ O A B ]\nBig [ O A B ]\n| for K in [0:2)\n| for N in [0:4)\nReg [ O B ]\n"
                       "| for K in [0:4)\n", a)
        res = simulate(op, a, m, functional=False)
        assert res.cycles == cycles
        assert res.model_latency == cycles


@pytest.mark.parametrize("shared", [False, True])
def test_outputs_that_finish_late_wait_for_the_pace_of_the_register_below(shared):
    # Reg (written at the clock edge: two halves) takes every output's partial sum back from Acc,
    # updates it and drains it, each at 16 bit/cycle: a 32-bit reload 2 cycles, the compute's read and
    # update 2, the drain 2. The reload of tile j + 2 waits for the drain of tile j, so two steps take
    # 6 cycles: step j (even) ends at 4 + 3j. Outputs finish in the last 4 of 32 steps; step 28 ends
    # at 88, Reg drains it by 90, and the 4 finished outputs leave Acc (streamed) at 2 bit/cycle, 16
    # cycles each: 154. The model took the first finished output at 28/32 of the compute alone (2
    # cycles a step: 128, -17%), not of the halves' pace below. Shared: Reg is one accumulator for a
    # column of two multipliers (rule 8), which reduce K in the network below it: the same times
    # (ZigZag's ascend_like, ResNet-18 layer3.0.downsample with the mapper's mapping: -10.9% -> -0.6%).
    reg = {"name": "Reg", "holds": ["O"], "capacity": "4 B", "width": "8 bit", "read_bandwidth": "16 bit/cycle",
           "write_bandwidth": "16 bit/cycle", "written_at_clock_edge": True}
    acc = {"name": "Acc", "holds": ["O"], "capacity": "1 KB", "width": "8 bit", "read_bandwidth": "unbounded",
           "double_buffered": True, "stream_single_tile": True}
    if shared:
        acc["fanout"] = {"axes": [{"name": "A", "size": 2}]}
        reg["shared_along"] = ["A"]
    arch = accelerator_from_dict({"name": "ring", "compute": {"mac_energy": "1 pJ"}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit",
         "write_bandwidth": "2 bit/cycle"}, acc, reg]})
    op = replace(gemm("g", m=1, n=4, k=16 if shared else 8), init_output="read")
    text = "DRAM [ O A B ]\nAcc [ O ]\n| for K in [0:8)\n| for N in [0:4)\n" + \
        ("| spatial-for K in [0:2) @A\n" if shared else "") + "Reg [ O ]\n"
    res = simulate(op, arch, parse_text(text, arch), functional=False)
    assert res.cycles == 154
    assert abs(res.model_error) < 0.01


@pytest.mark.parametrize("reg", [{"written_at_clock_edge": True}, {"double_buffered": True}, {}])
@pytest.mark.parametrize("split_k, cycles", [(3, 232), (4, 296)])
def test_outputs_that_finish_in_runs_leave_back_to_back_after_the_last_compute(reg, split_k, cycles):
    # 8 outputs of 32 bits; K split around M (as a kernel row or column around the output's rows):
    # outputs finish only at the last K position, 4 in a row (M), each piece 16 cycles at 2 bit/cycle
    # against 8 cycles of compute a tile. The first run's pieces catch up in the non-final tiles after
    # them; the last run starts when the first of the last 4 of 8 split_k tiles ends, (8 split_k - 3) x 8
    # cycles, and its 4 pieces leave back to back: + 64. The model had only the last piece after the last compute
    # (3: 208, -10.3%; 4: 272, -8.1%). ZigZag's tpu_like, ResNet-18 layer2.0.conv2 with the mapper's
    # mapping (R and S between the output loops): 119,722 against 122,834 (-2.5%) -> 122,842.
    arch = _acc_arch(True, "2 bit/cycle", reg)
    op = gemm("g", m=4, n=2, k=8 * split_k)
    text = f"DRAM [ O A B ]\nAcc [ O ]\n| for N in [0:2)\n| for K in [0:{split_k})\n| for M in [0:4)\nReg [ O ]\n" \
           "| for K in [0:8)\n"
    res = simulate(op, arch, parse_text(text, arch), functional=False)
    assert res.cycles == cycles == (8 * split_k - 3) * 8 + 4 * 16
    assert res.model_latency == cycles
