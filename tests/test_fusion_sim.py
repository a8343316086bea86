"""The simulator runs fused groups: its transfers equal the fusion model's, its cycles within 2%."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelmap.arch.presets import get_accelerator
from accelmap.errors import SpecError
from accelmap.fusion.brute_force import walk
from accelmap.fusion.geometry import MODES, Join, fused_counts, schedules
from accelmap.fusion.group_cost import InnerMappings, group_cost, pipeline_latency, resident_weight_bits
from accelmap.fusion.stages import mac_stage, pool_stage
from accelmap.mapping.sampling import random_mapping
from accelmap.sim.fused import simulate_fused, walk_blocks
from accelmap.workload import conv2d

BITS = {"eyeriss_like": {"I": 16, "W": 16, "O": 16}, "tpu_like": {"I": 8, "W": 8, "O": 32}}


def random_chain(rng: random.Random, bits: dict[str, int]):
    """2-3 convolutions (random kernels, strides, padding, channels), a pooling window between some."""
    h, w, c = rng.randint(6, 12), rng.randint(6, 12), rng.randint(2, 8)
    stages, macs = [], {}
    for i in range(rng.randint(2, 3)):
        if i and rng.random() < 0.3 and h >= 4 and w >= 4:
            p = pool_stage(f"pool{i}", channels=c, in_rows=h, in_cols=w, kernel=(2, 2), stride=(2, 2),
                           pads=(0, 0, 0, 0), bits=bits["O"])
            stages.append(p)
            h, w = p.out_rows, p.out_cols
        r = rng.choice([1, 3]) if min(h, w) >= 3 else 1
        stride = rng.choice([1, 1, 2]) if r > 1 else 1
        k = rng.randint(2, 8)
        op = conv2d(f"c{i}", c=c, h=h, w=w, k=k, r=r, s=r, stride=stride, padding=rng.randint(0, 1) if r > 1 else 0,
                    bits=bits)
        ms = mac_stage(op)
        macs[len(stages)] = ms
        stages.append(ms.stage)
        h, w, c = ms.stage.out_rows, ms.stage.out_cols, k
    return tuple(stages), macs


def random_inner(seed: int) -> InnerMappings:
    rng = random.Random(seed)
    return InnerMappings(lambda op, arch: random_mapping(op, arch, rng, check_fit=True))


@pytest.mark.parametrize("arch_name", ["eyeriss_like", "tpu_like"])
@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**9))
def test_simulated_group_moves_what_the_model_counts_and_takes_its_cycles_within_2_percent(arch_name, seed):
    arch = get_accelerator(arch_name)
    rng = random.Random(seed)
    stages, macs = random_chain(rng, BITS[arch_name])
    last = stages[-1]
    tr, tc = rng.randint(1, last.out_rows), rng.randint(1, last.out_cols)
    policies = tuple(rng.choice(list(MODES)) for _ in stages)
    resident = arch_name == "tpu_like" and rng.random() < 0.5
    inner = random_inner(seed)
    g = group_cost(stages, macs, arch, tr, tc, policies, inner, resident)
    if isinstance(g, str):
        return       # buffers too big for this random draw: nothing to run
    sim = simulate_fused(stages, macs, arch, tr, tc, policies, inner, resident, g.latency)
    assert sim.tiles == g.counts.tiles
    assert sim.macs == g.counts.macs
    assert sim.input_fetched == g.counts.input_fetched
    assert sim.output_written == g.counts.output_written
    assert sim.offchip_bits == g.offchip_bits
    # The pipeline's closed form over the simulator's own block cycles is the simulated run, exactly.
    blocks: dict[int, dict[tuple[int, int], tuple[float, int]]] = {j: {} for j in macs}
    for (j, r, c), got in sim.programs.items():
        blocks[j][(r, c)] = got
    rows, cols = schedules(stages, tr, tc, policies)
    closed = pipeline_latency(arch.levels[0], blocks, stages, rows, cols, resident_weight_bits(macs) if resident else 0)
    assert closed == pytest.approx(sim.cycles, rel=1e-9)
    # End to end the model is within 2%, or within the single-operator model's own error on a block
    # (tiny blocks; that error is the single-operator simulator tests' business).
    model_blocks = {(j, r, c): lat for j, sc in enumerate(g.stages) for r, c, _, lat, _ in sc.blocks}
    block_error = max(abs(model_blocks[k] - cyc) / cyc for k, (cyc, _) in sim.programs.items())
    assert sim.model_error is not None and abs(sim.model_error) <= max(0.02, block_error), (sim, g.latency)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10**9))
def test_the_simulators_blocks_are_the_point_walks(seed):
    """The valid-flag walk finds, per stage, the same computed blocks as the brute-force point walk."""
    rng = random.Random(seed)
    stages, _ = random_chain(rng, BITS["eyeriss_like"])
    last = stages[-1]
    tr, tc = rng.randint(1, last.out_rows), rng.randint(1, last.out_cols)
    policies = tuple(rng.choice(list(MODES)) for _ in stages)
    blocks, fetched = walk_blocks(stages, tr, tc, policies)
    ref = walk(stages, tr, tc, policies)
    assert sum(fetched) == ref.input_fetched
    for j in range(len(stages)):
        got: dict[tuple[int, int], int] = {}
        for row in blocks:
            b = row[j]
            if b is not None:
                got[(b[1] - b[0], b[3] - b[2])] = got.get((b[1] - b[0], b[3] - b[2]), 0) + 1
        assert got == ref.blocks[j]


def test_one_tile_is_its_load_then_its_blocks_then_its_write_back():
    """A group as one tile has no overlap: the model's and the simulator's cycles are that sum."""
    arch = get_accelerator("eyeriss_like")
    a = conv2d("a", c=4, h=8, w=8, k=8, r=3, s=3, padding=1, bits=BITS["eyeriss_like"])
    b = conv2d("b", c=8, h=8, w=8, k=4, r=3, s=3, padding=1, bits=BITS["eyeriss_like"])
    ma, mb = mac_stage(a), mac_stage(b)
    stages, macs = (ma.stage, mb.stage), {0: ma, 1: mb}
    inner = random_inner(3)
    g = group_cost(stages, macs, arch, 8, 8, ("fully-cached",) * 2, inner)
    assert not isinstance(g, str)
    sim = simulate_fused(stages, macs, arch, 8, 8, ("fully-cached",) * 2, inner, model_latency=g.latency)
    top = arch.levels[0]
    w_a, w_b = (g.stages[k].offchip_bits for k in (0, 1))
    w_a -= 4 * 64 * 16          # the input fetched is part of the first stage's off-chip bits
    w_b -= 4 * 64 * 16          # the output written, of the last one's
    load_b = w_b / top.read_bw_bits
    # b's weights load while a computes, so they add only if they take longer than a's block.
    expect = ((w_a + 4 * 64 * 16) / top.read_bw_bits + max(g.stages[0].latency, load_b) + g.stages[1].latency
              + 4 * 64 * 16 / top.write_bw_bits)
    assert g.latency == pytest.approx(expect, rel=1e-12)
    (cyc_a, _), (cyc_b, _) = sim.programs.values()
    assert sim.cycles == pytest.approx((w_a + 4 * 64 * 16) / top.read_bw_bits + max(cyc_a, load_b) + cyc_b
                                       + 4 * 64 * 16 / top.write_bw_bits, rel=1e-12)
    assert abs(sim.model_error or 0.0) <= 0.02


def test_a_policy_outside_the_three_modes_is_refused():
    rng = random.Random(0)
    stages, _ = random_chain(rng, BITS["eyeriss_like"])
    with pytest.raises(SpecError, match="halo policy"):
        walk_blocks(stages, 1, 1, ("cached",) * len(stages))


def residual_block(rng: random.Random, bits: dict[str, int]):
    """A ResNet-like block: 2-3 stride-1 convolutions (3x3 padded or 1x1) keeping h x w x c, so that the
    block's input can be added to its output."""
    h, w, c = rng.randint(4, 10), rng.randint(4, 10), rng.randint(2, 6)
    stages, macs = [], {}
    for i in range(rng.randint(2, 3)):
        r = rng.choice([1, 3])
        ms = mac_stage(conv2d(f"c{i}", c=c, h=h, w=w, k=c, r=r, s=r, padding=r // 2, bits=bits))
        macs[i] = ms
        stages.append(ms.stage)
    return tuple(stages), macs


@pytest.mark.parametrize("arch_name", ["eyeriss_like", "tpu_like"])
@settings(max_examples=6, deadline=None)
@given(st.integers(0, 10**9))
def test_simulated_residual_join_moves_what_the_model_counts(arch_name, seed):
    """A group ending with a residual add, its skip kept on chip or re-read per tile (or from outside
    the group): the simulator's transfers equal the model's, and the pipeline's closed form over the
    simulator's block cycles (the skip loaded with each tile's last block) is the simulated run."""
    arch = get_accelerator(arch_name)
    rng = random.Random(seed)
    stages, macs = residual_block(rng, BITS[arch_name])
    last = stages[-1]
    tr, tc = rng.randint(1, last.out_rows), rng.randint(1, last.out_cols)
    policies = tuple(rng.choice(list(MODES)) for _ in stages)
    join = Join("add", rng.choice([0, None]), BITS[arch_name]["I"])
    skip_policy = "kept" if join.skip is not None and rng.random() < 0.5 else "re-read"
    inner = random_inner(seed)
    g = group_cost(stages, macs, arch, tr, tc, policies, inner, False, join, skip_policy)
    if isinstance(g, str):
        return
    plain = fused_counts(stages, tr, tc, policies)
    skip_bits = last.out_rows * last.out_cols * last.out_depth * join.bits
    assert g.join_cost is not None and g.join_cost.offchip_bits == (0 if skip_policy == "kept" else skip_bits)
    assert g.offchip_bits == sum(s.offchip_bits for s in g.stages) + g.join_cost.offchip_bits
    sim = simulate_fused(stages, macs, arch, tr, tc, policies, inner, model_latency=g.latency, join=join,
                         skip_policy=skip_policy)
    assert sim.macs == g.counts.macs == plain.macs       # a kept skip is inside the windows: no extra work
    assert sim.input_fetched == g.counts.input_fetched
    assert sim.skip_bits == g.counts.skip_fetched * join.bits
    assert sim.offchip_bits == g.offchip_bits
    blocks: dict[int, dict[tuple[int, int], tuple[float, int]]] = {j: {} for j in macs}
    for (j, r, c), got in sim.programs.items():
        blocks[j][(r, c)] = got
    rows, cols = schedules(stages, tr, tc, policies)
    closed = pipeline_latency(arch.levels[0], blocks, stages, rows, cols, 0,
                              {} if skip_policy == "kept" else {len(stages) - 1: last.out_depth * join.bits})
    assert closed == pytest.approx(sim.cycles, rel=1e-9)
