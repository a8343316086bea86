"""A fused group's cost: the tile loop's geometry over each operator's own mapping of its tiles."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from accelmap.arch.presets import get_accelerator
from accelmap.cost.brute_force_counts import reference_counts
from accelmap.cost.model import evaluate
from accelmap.fusion.brute_force import walk
from accelmap.fusion.geometry import MODES
from accelmap.fusion.group_cost import InnerMappings, group_cost, reserved, store_index, tile_candidates
from accelmap.fusion.stages import mac_stage, tile_operator
from accelmap.mapping.sampling import random_mapping
from accelmap.workload import conv2d, gemm

EYERISS = get_accelerator("eyeriss_like")


def random_search(seed: int) -> InnerMappings:
    rng = random.Random(seed)
    return InnerMappings(lambda op, arch: random_mapping(op, arch, rng, check_fit=True))


def conv_pair(rng: random.Random):
    h, w, c, k = rng.randint(4, 7), rng.randint(3, 6), rng.randint(1, 3), rng.randint(1, 3)
    a = conv2d("a", c=c, h=h, w=w, k=k, r=3, s=3, padding=1, bits={"I": 16, "W": 16, "O": 16})
    b = conv2d("b", c=k, h=h, w=w, k=rng.randint(1, 3), r=rng.choice([1, 3]), s=rng.choice([1, 3]), padding=0,
               bits={"I": 16, "W": 16, "O": 16})
    return mac_stage(a), mac_stage(b)


@settings(max_examples=12)
@given(st.integers(0, 10**9))
def test_offchip_traffic_equals_the_walk_over_brute_force_counts(seed):
    """Every off-chip bit of a group, from the walk's tiles and the brute-force counter of each tile."""
    rng = random.Random(seed)
    ma, mb = conv_pair(rng)
    stages = (ma.stage, mb.stage)
    ty, tx = rng.randint(1, mb.stage.out_rows), rng.randint(1, mb.stage.out_cols)
    policies = tuple(rng.choice(list(MODES)) for _ in stages)
    inner = random_search(seed)
    got = group_cost(stages, {0: ma, 1: mb}, EYERISS, ty, tx, policies, inner)
    assert not isinstance(got, str), got
    ref = walk(stages, ty, tx, policies)
    arch_r, _ = reserved(EYERISS, got.counts.buffer_total_bits)
    expect = ref.input_fetched * 16 + ref.output_written * 16
    for ms, blocks in zip((ma, mb), ref.blocks, strict=True):
        largest = (max(r for r, _ in blocks), max(c for _, c in blocks))
        for shape, times in blocks.items():
            m = inner.mapping(ms, largest, shape, arch_r)
            counts = reference_counts(tile_operator(ms, *shape), arch_r, m)
            expect += times * sum(sum(c.as_tuple()) * 16 for (lv, x), c in counts.items() if lv == 0 and x == "W")
    assert got.offchip_bits == expect
    assert got.counts.macs == ref.macs


def test_one_whole_tile_is_the_layer_with_its_input_and_output_through_the_store():
    op = conv2d("a", c=3, h=6, w=6, k=4, r=3, s=3, padding=1, bits={"I": 16, "W": 16, "O": 16})
    ms = mac_stage(op)
    inner = random_search(1)
    got = group_cost((ms.stage,), {0: ms}, EYERISS, 6, 6, ("fully-cached",), inner)
    assert not isinstance(got, str)
    arch_r, _ = reserved(EYERISS, got.counts.buffer_total_bits)
    m = inner.mapping(ms, (6, 6), (6, 6), arch_r)
    whole = evaluate(tile_operator(ms, 6, 6), arch_r, m)
    w_bits = sum(c[1] for (lv, x), c in whole.counts.items() if lv == "DRAM" and x == "W") * 16
    # The input is fetched once without its padding; the output written once.
    assert got.offchip_bits == w_bits + 3 * 36 * 16 + 4 * 36 * 16
    assert got.stages[0].macs == op.macs
    # Energy: the layer's own, with its input and output at the store's price, plus the copies.
    glb, dram = EYERISS.levels[store_index(EYERISS)], EYERISS.levels[0]
    io = {x: sum(c) for (lv, x), c in whole.counts.items() if lv == "DRAM" and x in ("I", "O")}
    expect = (whole.energy_total - (io["I"] + io["O"]) * (dram.read_energy_pj - glb.read_energy_pj)
              + 3 * 36 * (dram.read_energy_pj + glb.write_energy_pj) + 4 * 36 * (dram.write_energy_pj
                                                                                  + glb.read_energy_pj))
    assert abs(got.energy - expect) <= 1e-9 * expect


def test_an_intermediate_that_fits_never_leaves_the_chip():
    bits = {"I": 16, "W": 16, "O": 16}
    a, b = mac_stage(gemm("ffn1", m=32, n=24, k=16, bits=bits)), mac_stage(gemm("ffn2", m=32, n=16, k=24, bits=bits))
    inner = random_search(2)
    got = group_cost((a.stage, b.stage), {0: a, 1: b}, EYERISS, 8, 1, ("fully-cached",) * 2, inner)
    assert not isinstance(got, str)
    assert got.counts.tiles == 4
    # Off chip: the input once and the weights (at least once per tile); the output once; no intermediate.
    assert got.stages[0].offchip_bits >= (32 * 16 + 4 * 16 * 24) * 16
    assert got.stages[1].offchip_bits >= (32 * 16 + 4 * 24 * 16) * 16
    assert got.offchip_bits == got.stages[0].offchip_bits + got.stages[1].offchip_bits
    assert got.counts.buffer_bits[1] == 8 * 24 * 16


def test_buffers_beyond_the_store_are_refused_with_the_reason():
    big = conv2d("big", c=64, h=224, w=224, k=64, r=3, s=3, padding=1)
    ms = mac_stage(big)
    got = group_cost((ms.stage, mac_stage(big).stage), {0: ms, 1: mac_stage(big)}, EYERISS, 224, 224,
                     ("fully-cached",) * 2, random_search(3))
    assert isinstance(got, str) and "do not fit GLB" in got


def test_tile_candidates_halve_down_to_one():
    assert tile_candidates(7) == [7, 4, 2, 1]
    assert tile_candidates(1) == [1]


def test_resident_weights_leave_the_chip_once_and_are_read_at_the_store_price():
    tpu = get_accelerator("tpu_like")
    bits = {"I": 8, "W": 8, "O": 32}
    a = mac_stage(conv2d("a", c=4, h=8, w=8, k=8, r=3, s=3, padding=1, bits=bits))
    b = mac_stage(conv2d("b", c=8, h=8, w=8, k=4, r=3, s=3, padding=1, bits=bits))
    stages, macs = (a.stage, b.stage), {0: a, 1: b}
    inner = random_search(4)
    kept = group_cost(stages, macs, tpu, 2, 8, ("fully-cached",) * 2, inner, weights_resident=True)
    assert not isinstance(kept, str) and kept.counts.tiles == 4
    # Off chip: the input once, both operators' weights once, the output once, whatever the tiles' mappings.
    assert kept.offchip_bits == 4 * 64 * 8 + (8 * 4 * 9 + 4 * 8 * 9) * 8 + 4 * 64 * 32
    assert kept.reserved_bits >= kept.counts.buffer_total_bits + (8 * 4 * 9 + 4 * 8 * 9) * 8
    refetched = group_cost(stages, macs, tpu, 2, 8, ("fully-cached",) * 2, inner)
    assert not isinstance(refetched, str) and refetched.offchip_bits > kept.offchip_bits
    # Eyeriss' global buffer holds no weights.
    assert group_cost(stages, macs, EYERISS, 2, 8, ("fully-cached",) * 2, inner, True) == "GLB holds no weights"
