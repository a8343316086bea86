"""Access granularity (``levels[i].access_granularity``): exact energies on hand-computed cases,
ZigZag's rounding on MobileNetV2's first depthwise layer, the import and the schema's errors."""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from accelmap.arch.schema import load_accelerator
from accelmap.arch.zigzag_import import load_zigzag_accelerator
from accelmap.cost.batch import evaluate_batch
from accelmap.cost.model import evaluate
from accelmap.errors import SpecError
from accelmap.mapping import Loop, Mapping
from accelmap.workload.constructors import depthwise_conv2d, gemm

RAW = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "zigzag_raw"


def two_levels(granularity=None, fanout=None):
    buf = {"name": "buf", "holds": ["I", "W", "O"], "capacity": "1 KiB", "width": "64 bit",
           "read_energy": "64 pJ", "write_energy": "32 pJ"}     # 1 pJ per bit read, 0.5 pJ per bit written
    if granularity is not None:
        buf["access_granularity"] = granularity
    if fanout is not None:
        buf["fanout"] = fanout
    return {"name": "two", "compute": {"mac_energy": "0 pJ", "precision": {"I": 8, "W": 8, "O": 16}},
            "levels": [{"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "64 bit",
                        "read_energy": "64 pJ", "write_energy": "64 pJ"}, buf]}


def load(tmp_path, data, name="a.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_accelerator(p)


# O[M,N] += A[M,K] * B[K,N], M=2, N=2, K=3, every loop at buf, one MAC per cycle: 12 cycles, each
# reading one 8-bit A and one 8-bit B and updating one 16-bit O. Counts at buf: A and B 6 fills,
# 12 reads; O 12 updates, 8 reads (first touches start from zero), 4 drains. DRAM: A and B 6 reads,
# O 4 updates: 6*8 + 6*8 + 4*16 = 160 pJ at 1 pJ/bit. No loop above buf: each operand moves between
# DRAM and buf in one transfer (A, B: 48 bits; O: 64 bits), rounded up to whole granules too.
# At buf, per operand:
#   granularity   A (= B): reads + fills          O: reads + drains + updates
#   none          12*8 + 48/2 = 120               8*16 + 64 + 12*16/2 = 288
#   16 bit        12*16 + 48/2 = 216              288 (16-bit accesses are whole granules)
#   32 bit        12*32 + 64/2 = 416              8*32 + 64 + 12*32/2 = 512
#   64 bit        12*64 + 64/2 = 800              8*64 + 64 + 12*64/2 = 960
@pytest.mark.parametrize("granularity, a_pj, o_pj", [(None, 120, 288), ("16 bit", 216, 288),
                                                      ("32 bit", 416, 512), ("8 B", 800, 960)])
def test_compute_side_accesses_round_up_to_whole_granules(tmp_path, granularity, a_pj, o_pj):
    arch = load(tmp_path, two_levels(granularity))
    op = gemm("g", m=2, n=2, k=3, bits={"O": 16})
    m = Mapping((Loop("M", 2, 1), Loop("N", 2, 1), Loop("K", 3, 1)), (frozenset("OAB"), frozenset("OAB")))
    r = evaluate(op, arch, m)
    assert r.energy[("buf", "A")] == a_pj and r.energy[("buf", "B")] == a_pj and r.energy[("buf", "O")] == o_pj
    assert r.energy[("DRAM", "A")] == 48 and r.energy[("DRAM", "O")] == 64
    assert r.energy_total == 160 + 2 * a_pj + o_pj


def test_tile_transfers_between_levels_round_up_to_whole_granules(tmp_path):
    """M at DRAM, N and K at buf, a 64-bit granularity at both levels. buf holds one row of A (3
    elements, 24 bits) moved twice, all of B (48 bits) moved once, one row of O (2 elements, 32 bits)
    drained twice: each transfer is one 64-bit granule at either end (ZigZag 3.9.1 rounds every data
    movement so, ``_calc_memory_access``)."""
    data = two_levels("64 bit")
    data["levels"][0]["access_granularity"] = "64 bit"
    arch = load(tmp_path, data)
    op = gemm("g", m=2, n=2, k=3, bits={"O": 16})
    m = Mapping((Loop("M", 2, 0), Loop("N", 2, 1), Loop("K", 3, 1)), (frozenset("OAB"), frozenset("OAB")))
    r = evaluate(op, arch, m)
    # DRAM at 1 pJ/bit either way: A 2 reads of 64, B 1 read of 64, O 2 updates of 64 (by the bit: 48, 48, 64).
    assert (r.energy[("DRAM", "A")], r.energy[("DRAM", "B")], r.energy[("DRAM", "O")]) == (128, 64, 128)
    # buf: 12 compute reads of one 64-bit granule at 1 pJ/bit; fills at 0.5 pJ/bit: A 2 x 64, B 64.
    assert r.energy[("buf", "A")] == 12 * 64 + 2 * 64 / 2
    assert r.energy[("buf", "B")] == 12 * 64 + 64 / 2
    # O: 8 partial-sum reads and 12 updates of one granule each, 2 drains of one granule.
    assert r.energy[("buf", "O")] == 8 * 64 + 12 * 64 / 2 + 2 * 64
    by_bit = evaluate(op, load(tmp_path, two_levels(), "b.yaml"), m)
    assert (by_bit.energy[("DRAM", "A")], by_bit.energy[("buf", "A")]) == (48, 12 * 8 + 48 / 2)
    structure = [(l.dim, l.level, l.axis) for l in m.loops]
    batch = evaluate_batch(op, arch, structure, m.keep, np.array([[l.bound for l in m.loops]]))
    assert batch["energy"][0] == r.energy_total


def test_one_access_carries_what_the_array_reads_in_a_cycle(tmp_path):
    """N across two PEs below buf: each cycle buf sends one A to both PEs (multicast: 8 bits, one
    16-bit granule) and two Bs (16 bits, one granule), and takes two O updates (32 bits, two)."""
    fan = {"axes": [{"name": "X", "size": 2}]}
    arch = load(tmp_path, two_levels("16 bit", fan))
    op = gemm("g", m=2, n=2, k=3, bits={"O": 16})
    m = Mapping((Loop("M", 2, 1), Loop("K", 3, 1), Loop("N", 2, 1, "X")), (frozenset("OAB"), frozenset("OAB")))
    r = evaluate(op, arch, m)
    # 6 cycles. A: 6 reads of one 8-bit element, each a 16-bit granule, + 6 fills of 8 bits at 0.5 pJ/bit.
    assert r.energy[("buf", "A")] == 6 * 16 + 6 * 8 / 2
    # B: 12 reads in 6 accesses of 16 bits (no rounding), 6 fills.
    assert r.energy[("buf", "B")] == 12 * 8 + 6 * 8 / 2
    # O: 12 updates in 6 accesses of 32 bits; K is innermost, so the 8 partial-sum reads come two per
    # access too (4 accesses of 32 bits); 4 drains of 16 bits.
    assert r.energy[("buf", "O")] == 8 * 16 + 4 * 16 + 12 * 16 / 2
    by_bit = evaluate(op, load(tmp_path, two_levels(None, fan), "b.yaml"), m)
    assert r.energy_total - by_bit.energy_total == 6 * (16 - 8)


def tpu_like_zigzag():
    """ZigZag 3.9.1's tpu_like hardware file (zigzag/inputs/hardware/tpu_like.yaml), port by port."""
    def mem(size, r, w, operands, served, bw_min, bw_max, rw=False):
        kinds = ["read_write"] if rw else ["read", "write"]
        return {"size": size, "r_cost": r, "w_cost": w, "area": 0, "latency": 1, "operands": operands,
                "ports": [{"name": f"p{j}", "type": k, "bandwidth_min": bw_min, "bandwidth_max": bw_max,
                           "allocation": [f"{o}, tl" for o in operands]} for j, k in enumerate(kinds)],
                "served_dimensions": served}
    return {"name": "tpu_like", "memories": {
        "rf_128B": mem(1024, 0.095, 0.095, ["I2"], [], 8, 8),
        "rf_2B": mem(16, 0.021, 0.021, ["O"], [], 16, 16),
        "sram_2MB": mem(16777216, 416.16, 378.4, ["I1", "O"], ["D1", "D2"], 64, 2048),
        "dram": mem(10000000000, 700, 750, ["I1", "I2", "O"], ["D1", "D2"], 64, 64, rw=True),
    }, "operational_array": {"unit_energy": 0.04, "unit_area": 1, "dimensions": ["D1", "D2"], "sizes": [32, 32]}}


def test_import_takes_the_granularity_from_bandwidth_min(tmp_path):
    p = tmp_path / "tpu.yaml"
    p.write_text(yaml.safe_dump(tpu_like_zigzag(), sort_keys=False))
    arch, _ = load_zigzag_accelerator(p)
    assert {lv.name: (lv.width_bits, lv.access_granularity_bits) for lv in arch.levels} == {
        "dram": (64, 64), "sram_2MB": (2048, 64), "rf_2B": (16, 16), "rf_128B": (8, 8)}


def test_mobilenetv2_first_depthwise_on_tpu_like_matches_zigzag(tmp_path):
    """ZigZag's mapping of MobileNetV2 features.1's depthwise 3x3 convolution on tpu_like: the array
    runs one MAC per cycle (its mapping file unrolls only K and C, both 1 here) and every MAC reads
    one 8-bit input from sram_2MB, which ZigZag charges as a 64-bit access of its 2048-bit word."""
    p = tmp_path / "tpu.yaml"
    p.write_text(yaml.safe_dump(tpu_like_zigzag(), sort_keys=False))
    arch, _ = load_zigzag_accelerator(p)
    op = depthwise_conv2d("dw", c=32, h=112, w=112, r=3, s=3, padding=1, bits={"O": 16})
    m = Mapping((Loop("G", 32, 1), Loop("Q", 112, 1), Loop("P", 7, 1), Loop("P", 16, 1),
                 Loop("R", 3, 3), Loop("S", 3, 3)),
                (frozenset("IWO"), frozenset("IO"), frozenset("O"), frozenset("W")))
    r = evaluate(op, arch, m)
    # the whole input is one sram_2MB tile: with the import's padding: generated (ZigZag caps a tile at the
    # stored extent) it fills the real 112 x 112 input, not the padded 114 x 114 one
    reads, real = 32 * 112 * 112 * 9, 32 * 112 * 112
    fill = real * 8 / 2048 * 378.4
    assert math.isclose(r.energy[("sram_2MB", "I")], reads * 64 / 2048 * 416.16 + fill, rel_tol=1e-12)
    # by the bit the reads cost one eighth: 6.49 uJ instead of 47.6
    assert math.isclose(r.energy[("sram_2MB", "I")] - fill, 8 * reads * 8 / 2048 * 416.16, rel_tol=1e-12)
    # O: each finished 8-bit output comes up from rf_2B in its own transfer, charged as one 64-bit
    # granule (401408 of them); the whole output drains to DRAM in one transfer, by the bit.
    outs = 32 * 112 * 112
    o_sram = outs * 64 / 2048 * 378.4 + outs * 8 / 2048 * 416.16
    assert math.isclose(r.energy[("sram_2MB", "O")], o_sram, rel_tol=1e-12)
    raw = RAW / "mobilenetv2-tpu_like-EDP.json"
    if not raw.exists():
        pytest.skip(f"{raw} not present")
    zl = next(x for x in json.loads(raw.read_text())["layers"] if "features.1/" in x["name"])
    assert math.isclose(r.energy[("sram_2MB", "I")], zl["mem_energy"]["I"][0], rel_tol=1e-9)
    # with the halo moved (padding: moved) the padded 114 x 114 input fills it
    moved = evaluate(op, replace(arch, padding_generated=False), m)
    assert math.isclose(moved.energy[("sram_2MB", "I")] - r.energy[("sram_2MB", "I")],
                        (32 * 114 * 114 - real) * 8 / 2048 * 378.4, rel_tol=1e-9)
    assert math.isclose(r.energy[("sram_2MB", "O")], zl["mem_energy"]["O"][1], rel_tol=1e-12)


@pytest.mark.parametrize("value, match", [
    ("128 bit", r"levels\[1\]\.access_granularity: '128 bit' is wider than the level's width \(64 bit\)"),
    ("0 bit", r"levels\[1\]\.access_granularity: .*at least 1 bit"),
    (16, r"levels\[1\]\.access_granularity"),
    ("16 pJ", r"levels\[1\]\.access_granularity: .*unknown unit"),
])
def test_bad_granularity_is_one_clear_error(tmp_path, value, match):
    with pytest.raises(SpecError, match=match) as e:
        load(tmp_path, two_levels(value))
    assert "a.yaml" in str(e.value) and "\n" not in str(e.value)


def test_transfers_of_unequal_size_round_each_on_its_own(tmp_path):
    """A 1-D sliding window (conv2d with H = 1: P over 4 outputs at DRAM, S = 3 at buf): buf's input
    tile is 3 elements (24 bits) first, then one new element (8 bits) at each of the 3 steps. With a
    16-bit granularity at DRAM each transfer is rounded on its own, as ZigZag rounds every transfer
    period: 2 + 1 + 1 + 1 = 5 granules = 80 bits read from DRAM at 1 pJ/bit. Rounding the mean
    transfer (6 elements in 4 transfers, 12 bits) would charge 4 granules, 64 pJ."""
    from accelmap.workload.constructors import conv2d

    data = two_levels()
    data["levels"][0]["access_granularity"] = "16 bit"
    arch = load(tmp_path, data)
    op = conv2d("c", c=1, h=1, w=6, k=1, r=1, s=3, bits={"O": 16})
    m = Mapping((Loop("Q", 4, 0), Loop("S", 3, 1)), (frozenset("IWO"), frozenset("IWO")))
    r = evaluate(op, arch, m)
    assert r.counts[("DRAM", "I")][1] == 6
    assert r.energy[("DRAM", "I")] == 80
    structure = [(l.dim, l.level, l.axis) for l in m.loops]
    batch = evaluate_batch(op, arch, structure, m.keep, np.array([[l.bound for l in m.loops]]))
    assert batch["energy"][0] == r.energy_total
