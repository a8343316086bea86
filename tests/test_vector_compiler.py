"""The six-step vectorizing compiler: Vyasa's running example, the capacity and shuffle rejections, and
bit-exact execution (NumPy emulator, compiled C++) over strides, dilations, channels, depthwise and CONV3D."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from accelmap.arch.presets import get_accelerator
from accelmap.vector.compiler import CompileError, Schedule, compile_conv
from accelmap.vector.conv import ConvSpec, Layout, place
from accelmap.vector.cycles import estimate
from accelmap.vector.emit_cpp import emit_cpp, run_kernel
from accelmap.vector.machine import core_from_accelerator
from accelmap.vector.program import Load, Mac, Store, expected_output, output_of, packed_operands, run_emulated
from accelmap.vector.tuner import TuneError, tune
from accelmap.vector.workloads import paper_workload

MEM = 128 * 1024 * 8
L = Layout.parse
X_LAYOUTS = (("O", L("K Y X")), ("W", L("K C S R")), ("I", L("C Y X")))


def _emulated_exact(prog, seed=0):
    inp, wgt, ib, wb = packed_operands(prog, seed)
    return np.array_equal(output_of(prog, run_emulated(prog, ib, wb)), expected_output(prog, inp, wgt))


def test_running_example_table_iv():
    """4x3 filter (R=4 wide, S=3 high), int16, 16 lanes x 2 columns: 12 MACs per output vector become 6 fused
    ones, 12 input loads become 3 covering I(x:x+31) loads, the 4 taps of a row come from one W register."""
    conv = ConvSpec("ex", x=256, y=16, k=1, c=1, r=4, s=3)
    prog = compile_conv(conv, Schedule("x", "mac16", (), ("y", "x"), X_LAYOUTS), MEM)
    macs = [i for i in prog.body if isinstance(i, Mac)]
    loads = [prog.registers[i.reg] for i in prog.body if isinstance(i, Load)]
    assert len(macs) == 6 and sum(isinstance(i, Store) for i in prog.body) == 1
    assert [(r.tensor, r.start, r.elems) for r in loads if r.tensor == "I"] == [("I", 0, 32), ("I", 264, 32),
                                                                                 ("I", 528, 32)]
    assert [(r.start, r.bits) for r in loads if r.tensor == "W"] == [(0, 128), (8, 128), (16, 128)]
    # O(x:x+15) += SELECT(V2, {j}) * SELECT(V1, {i+j}) and SELECT(V2, {j+2}) * SELECT(V1, {i+j+2})
    assert [m.xparams for m in macs[:2]] == [(0, 0x03020100, 0x07060504, 0x2110), (2, 0x03020100, 0x07060504, 0x2110)]
    assert [m.zparams for m in macs[:2]] == [(0, 0, 0, 1), (2, 0, 0, 1)]
    assert [m.first for m in macs] == [True] + [False] * 5
    assert _emulated_exact(prog)


def test_odd_filter_is_padded_with_a_zero_column():
    conv = ConvSpec("cv3", x=256, y=16, k=1, c=1, r=3, s=3)
    prog = compile_conv(conv, Schedule("x", "mac16", (("y", 2),), ("y", "x"), X_LAYOUTS), MEM)
    macs = [i for i in prog.body if isinstance(i, Mac)]
    assert len(macs) == 12 and [m.useful for m in macs[:2]] == [32, 16]
    # interleaving keeps fewer registers live than issuing every load first (Vyasa step 5)
    assert (prog.peak_live_bits, prog.naive_live_bits) == (1408, 2432)
    assert _emulated_exact(prog)


def test_register_capacity_rejects_wide_unroll_along_x():
    conv = ConvSpec("cv3", x=256, y=16, k=1, c=1, r=3, s=3)
    with pytest.raises(CompileError, match="1024-bit widest register"):
        compile_conv(conv, Schedule("x", "mac16", (("x", 4),), ("y", "x"), X_LAYOUTS), MEM)


def test_shuffle_network_rejects_stride_and_dilation_2_at_16_bit():
    conv = ConvSpec("sd", x=32, y=2, k=1, c=1, r=2, s=1, stride=2, dilation=2)
    with pytest.raises(CompileError, match="shuffle network cannot express"):
        compile_conv(conv, Schedule("x", "mac16", (), ("y", "x"), X_LAYOUTS), MEM)
    # the 32-bit datapath selects at full 32-bit granularity and takes it
    prog = compile_conv(replace(conv, bits=32), Schedule("x", "lmac8", (), ("y", "x"), X_LAYOUTS), MEM)
    assert _emulated_exact(prog)


def test_layout_rows_are_padded_to_128_bit():
    t = place("I", L("C/2 Y X C%2"), {"X": 130, "Y": 4, "C": 8}, 8, 0)
    assert t.strides == (1056, 264, 2, 1) and t.size == 4 * 1056


@pytest.mark.parametrize("conv", [
    ConvSpec("s2", x=32, y=3, k=2, c=3, r=3, s=2, stride=2),
    ConvSpec("d2", x=16, y=2, k=16, c=4, r=3, s=3, dilation=2),
    ConvSpec("ch", x=16, y=2, k=32, c=4, r=1, s=1),
    ConvSpec("dw", x=32, y=2, k=4, c=1, r=5, s=3, depthwise=True),
    ConvSpec("c3d", x=16, y=2, z=2, k=2, c=2, r=3, s=3, t=3),
    ConvSpec("s2i32", x=16, y=2, k=8, c=3, r=3, s=3, stride=2, bits=32),
    ConvSpec("c3d32", x=8, y=2, z=2, k=8, c=2, r=2, s=2, t=2, bits=32),
])
def test_tuned_kernels_are_bit_exact(conv):
    core = core_from_accelerator(get_accelerator("aie_like"))
    res = tune(conv, core)
    assert _emulated_exact(res.program, seed=1)
    rep = run_kernel(res.program, seed=2)
    assert rep.exact_cpp and rep.exact_emulator


def test_every_variant_the_tuner_compiles_is_bit_exact():
    """Not only the winner: every schedule of a small workload the compiler accepts computes the convolution."""
    import itertools

    from accelmap.vector.tuner import layout_candidates
    conv = ConvSpec("small", x=32, y=2, k=16, c=4, r=3, s=2)
    accepted = rejected = 0
    for shape, lanes, cols in (("mac16", 16, 2), ("mac8", 8, 4)):
        for v in ("x", "k"):
            for lay in layout_candidates(conv, v, lanes, cols):
                for ux, uy in itertools.product((1, 2), (1, 2)):
                    sched = Schedule(v, shape, (("x", ux), ("y", uy)), ("k", "y", "x"), lay)
                    try:
                        prog = compile_conv(conv, sched, MEM)
                    except CompileError:
                        rejected += 1
                        continue
                    accepted += 1
                    assert _emulated_exact(prog), sched
    assert accepted >= 10


def test_emitted_cpp_names_the_intrinsics_and_loop_sizes():
    conv = ConvSpec("ex", x=256, y=16, k=1, c=1, r=4, s=3)
    prog = compile_conv(conv, Schedule("x", "mac16", (), ("y", "x"), X_LAYOUTS), MEM)
    src = emit_cpp(prog)
    assert "mul16(r0, 0, 0x3020100, 0x7060504, 0x2110, window<16>(r3, 0), 0, 0, 0, 1);" in src
    assert "chess_loop_range(16, 16) chess_prepare_for_pipelining" in src
    assert src.count("load_v<32>(pI") == 3 and src.count("store_v<int16_t, 16>") == 1


def test_cycle_model_exact_for_a_small_program():
    core = core_from_accelerator(get_accelerator("aie_like"))
    conv = ConvSpec("cv3", x=256, y=16, k=1, c=1, r=3, s=3)
    prog = compile_conv(conv, Schedule("x", "mac16", (("y", 2),), ("y", "x"), X_LAYOUTS), MEM)
    c = estimate(prog, core)
    # 12 mac16 on cycles 0..11 (II 12, mac-bound); 11 load slots: 4 x 512-bit input rows of 2 slots and 3 x
    # 128-bit filter rows, as late as their first use allows (the first at -8); the last store at 11 + 6 completes
    # at 19: one iteration is 28 cycles. Hoisting the filter would only add a preheader (the loop is mac-bound).
    assert (c.macs_per_body, c.load_ops, c.store_ops, c.ii, c.res_mii, c.bound) == (12, 11, 2, 12, 12, "mac")
    assert (c.hoisted_bits, c.reloads, c.length, c.unroll) == (0, 0, 28, 1)
    assert c.schedule.mac_times == tuple(range(12)) and c.schedule.store_times == (11, 17)
    assert min(t for _n, t in c.schedule.load_times) == -8
    # y: 8 outer trips, x: 16 pipelined trips: 15 x II + 26 each (first issue at -8 to the last store at 17); outer
    # trip 4; call 20; the last store writes memory 1 cycle after the last issue
    assert (c.inner_trips, c.outer_trips, c.schedule.issue_span, c.schedule.drain) == (16, 8, 26, 1)
    assert c.cycles == 8 * (15 * 12 + 26 + 4) + 20 + 1 == 1701
    assert c.macs_per_cycle == 36864 / 1701


def test_fc_int32_is_tiled_over_k_and_runs_bit_exact():
    core = core_from_accelerator(get_accelerator("aie_like"))
    res = tune(paper_workload("FC", 32), core)
    # the 4096x8 int32 filter alone is the whole 128 KB: two K tiles of 2048 (64 KB of filter each) fit
    assert res.tiles == 2 and res.program.conv.k == 2048 and res.conv.k == 4096
    t = res.tiled
    assert t is not None and t.kernel_cycles == 2 * res.cost.cycles and t.filter_bits_per_tile == 2048 * 8 * 32
    # streamed: the first filter tile (8192 cycles at 64 bit/cycle), then the stream of the second one overlaps
    # the first tile's compute, then the last tile computes
    assert t.streamed_cycles == 8192 + max(res.cost.cycles, 8192) + res.cost.cycles and t.stream_bound
    rep = run_kernel(res.program, seed=2, tiles=2)
    assert rep.exact_cpp and rep.exact_emulator


def test_paper_schedules_compile_and_cv2x2_int16_is_modeled_exactly():
    from accelmap.vector.workloads import paper_rows, paper_schedule
    core = core_from_accelerator(get_accelerator("aie_like"))
    refused = []
    for row in paper_rows():
        for bits in (32, 16):
            sched = paper_schedule(row, bits)
            if sched is None:
                continue
            try:
                compile_conv(replace(row.conv, bits=bits), sched, core.data_mem_bits)
            except CompileError as e:
                refused.append((row.conv.name, bits, "data memory" in str(e)))
    assert refused == [("FC", 32, True)]      # 4096x8 int32 weights alone are the whole 128 KB
    row = paper_rows()[0]
    prog = compile_conv(replace(row.conv, bits=16), paper_schedule(row, 16), core.data_mem_bits)
    c = estimate(prog, core)
    # U&J y 8: 8 groups x 2 filter rows, 1 fused mac16 each; 9 input rows of 512 bit (2 slots); 2 filter rows
    # hoisted. Resource bound 16, but 8 accumulators of 768 bits share a file of two: every MAC switches X register
    # or accumulator, and a 2-cycle bubble at each of the 15 switches is what lets them fit: II 16 + 30 = 46.
    assert (c.macs_per_body, c.load_ops, c.store_ops, c.res_mii, c.ii, c.bound) == (16, 18, 8, 16, 46, "registers")
    assert (c.inner_trips, c.outer_trips, c.hoisted_bits, c.schedule.bubble, c.length) == (16, 2, 256, 2, 61)
    # preheader: the 2 hoisted 128-bit loads take 1 cycle; the loop's own loads lead its first MAC by > 7 cycles
    assert c.cycles == 2 * (15 * 46 + 59 + 1 + 4) + 20 + 1 == 1529


def test_random_convolutions_tune_to_exact_kernels():
    """Randomized (fixed seed) shapes, strides, dilations, channels and precisions: whatever the tuner picks is
    exact on the emulator, and a shape it cannot compile is refused with a reason, never miscompiled."""
    core = core_from_accelerator(get_accelerator("aie_like"))
    rng = np.random.default_rng(7)
    compiled = 0
    for _ in range(24):
        bits = int(rng.choice([16, 32]))
        conv = ConvSpec("rnd", x=int(rng.choice([16, 32, 48])), y=int(rng.integers(1, 4)),
                        k=int(rng.choice([1, 8, 16])), c=int(rng.integers(1, 5)), r=int(rng.integers(1, 5)),
                        s=int(rng.integers(1, 4)), stride=int(rng.integers(1, 3)), dilation=int(rng.integers(1, 3)),
                        bits=bits)
        try:
            res = tune(conv, core)
        except TuneError as e:
            assert "no schedule compiles" in str(e)
            continue
        compiled += 1
        assert _emulated_exact(res.program, seed=3), (conv, res.schedule)
    assert compiled >= 18


def test_tuner_choice_for_cv3x3_int16_is_pinned():
    core = core_from_accelerator(get_accelerator("aie_like"))
    res = tune(paper_workload("CV-3x3", 16), core)
    assert str(res.schedule) == "vec x mac16 U&J x1,y8,z1,k1 order yx O:KYX W:KCSR I:CYX"
    assert (res.evaluated, res.rejected) == (20, (("widest register", 4),))
    # 8 groups x 3 rows x 2 mac16 (3 taps padded to 4 columns) = II 48 at the resource bound; 16 pipelined x-trips
    # in 2 y-trips, one iteration 64 cycles to the last store's completion, 62 from first to last issue
    assert (res.cost.ii, res.cost.res_mii, res.cost.length, res.cost.schedule.issue_span) == (48, 48, 64, 62)
    assert res.cost.cycles == 2 * (15 * 48 + 62 + 4) + 20 + 1


def _padded_conv_by_loops(conv, inp, wgt):
    """Brute force: every output, every tap, reading zero outside the stored image."""
    (xl, _xh), (yl, _yh) = conv.pad
    out = np.zeros((conv.x, conv.y, conv.k), dtype=np.int64)
    for x, y, k, c, r, s in np.ndindex(conv.x, conv.y, conv.k, conv.c, conv.r, conv.s):
        ix, iy = x * conv.stride + r * conv.dilation - xl, y * conv.stride + s * conv.dilation - yl
        if 0 <= ix < inp.shape[0] and 0 <= iy < inp.shape[1]:
            out[x, y, k] += int(inp[ix, iy, c]) * int(wgt[r, s, c, k])
    return out


@pytest.mark.parametrize("conv", [
    ConvSpec("pad1", x=16, y=3, k=8, c=2, r=3, s=3, pad=((1, 1), (1, 1))),
    ConvSpec("pad_asym", x=16, y=2, k=8, c=2, r=3, s=2, pad=((2, 0), (0, 1)), bits=32),
    ConvSpec("pad_s2", x=16, y=2, k=16, c=1, r=3, s=3, stride=2, pad=((1, 0), (1, 0)), bits=32),
])
def test_padded_convolutions_read_a_zero_halo(conv):
    core = core_from_accelerator(get_accelerator("aie_like"))
    res = tune(conv, core)
    inp, wgt, _ib, _wb = packed_operands(res.program, 5)
    assert inp.shape == conv.stored_input_shape()
    assert inp.shape[:2] == (conv.input_extent(conv.x, conv.r) - sum(conv.pad[0]),
                             conv.input_extent(conv.y, conv.s) - sum(conv.pad[1]))
    want = _padded_conv_by_loops(conv, inp, wgt)
    assert np.array_equal(expected_output(res.program, inp, wgt), want)
    assert _emulated_exact(res.program, seed=5)
    assert run_kernel(res.program, seed=5).ok


def test_padding_that_leaves_no_image_is_refused():
    with pytest.raises(Exception, match="leaves no stored input along X"):
        ConvSpec("bad", x=4, y=1, k=1, c=1, r=3, s=1, pad=((3, 3), (0, 0)))
