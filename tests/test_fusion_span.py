"""Groups spanning two residual blocks: a join inside the group (its add's result read by the next
block and added again by the next join), counted by the closed forms and by the point walk alike."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelmap.arch.presets import get_accelerator
from accelmap.errors import SpecError
from accelmap.fusion.brute_force import walk
from accelmap.fusion.chain import fusable_chains, span_residual_blocks
from accelmap.fusion.geometry import MODES, SKIP_POLICIES, AxisMap, Join, Stage, fused_counts, schedules
from accelmap.fusion.group_cost import InnerMappings, group_cost, pipeline_latency
from accelmap.fusion.stages import mac_stage
from accelmap.mapping.sampling import random_mapping
from accelmap.sim.fused import simulate_fused
from accelmap.workload import conv2d
from accelmap.workload.models import load_model
from accelmap.workload.models.bundled import bundled_model_path
from accelmap.workload.models.chains import model_chains
from fusion_walk import assert_counts_equal_walk


def two_blocks(rng: random.Random):
    """4-5 stride-1 stages keeping an h x w x c shape (windows shifted at random), a join inside the
    group after a random stage (its skip a random tensor before it), sometimes a second one after a later
    stage, and one ending it, whose skip may be the last inner add's result."""
    h, w, c = rng.randint(3, 8), rng.randint(2, 7), rng.randint(1, 2)
    stages = []
    for i in range(rng.randint(4, 5)):
        maps = []
        for _ in range(2):
            span = rng.randint(1, 3)
            maps.append(AxisMap(1, span, rng.randint(0, span)))
        stages.append(Stage(f"s{i}", h, w, c, h, w, c, maps[0], maps[1], c * maps[0].span * maps[1].span, 8, 8))
    n = len(stages)
    at = rng.randint(1, n - 1)
    inner = [Join("add1", rng.randrange(at), rng.choice([8, 16]), at)]
    if at < n - 1 and rng.random() < 0.5:
        # a second block's add inside the group (three blocks), its skip possibly the first add's result
        at2 = rng.randint(at + 1, n - 1)
        inner.append(Join("add1b", rng.choice([at, rng.randrange(at2)]), 8, at2))
    end = Join("add2", rng.choice([inner[-1].at, rng.randrange(n)]), 8)
    return tuple(stages), tuple(inner), end


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**9))
def test_spanning_join_counts_equal_the_walk(seed):
    rng = random.Random(seed)
    stages, inner, end = two_blocks(rng)
    last = stages[-1]
    ty, tx = rng.randint(1, last.out_rows), rng.randint(1, last.out_cols)
    policies = tuple(rng.choice(list(MODES)) for _ in stages)
    # each join's skip kept or re-read on its own (the search chooses per join)
    ij = tuple((j, rng.choice(SKIP_POLICIES)) for j in inner)
    sp_end = rng.choice(SKIP_POLICIES)
    ref = walk(stages, ty, tx, policies, end, sp_end, ij)
    try:
        model = fused_counts(stages, ty, tx, policies, end, sp_end, ij)
    except SpecError:
        # Refused exactly where a kept skip's region would be no rectangle of the two axes.
        assert "kept" in [sp for _, sp in ij] + [sp_end] and ref.skip_window_empty
        return
    assert not ref.skip_window_empty
    assert_counts_equal_walk(model, ref)


def test_two_resnet_blocks_in_one_group():
    """Two ResNet basic blocks (padded 3x3 convolutions, 12x12x2) as one group, tiles of 6x6 fully
    cached: both skips kept cost nothing (each lies in its windows) and no off-chip read; re-reading the
    inner one fetches its 12x12x2 skip once per position its add computes (each once: it is cached)."""
    convs = tuple(mac_stage(conv2d(f"conv{i}", c=2, h=12, w=12, k=2, r=3, s=3, padding=1)).stage for i in range(4))
    pol = ("fully-cached",) * 4
    inner, end = Join("add1", 0, 8, 2), Join("add2", 2, 8)
    plain = fused_counts(convs, 6, 6, pol)
    kept = fused_counts(convs, 6, 6, pol, end, "kept", ((inner, "kept"),))
    assert kept.macs == plain.macs and kept.buffer_bits == plain.buffer_bits and kept.skip_fetched == 0
    again = fused_counts(convs, 6, 6, pol, end, "kept", ((inner, "re-read"),))
    assert again.skip_fetched == 12 * 12 * 2
    assert again.macs == plain.macs
    assert again == fused_counts(convs, 6, 6, pol, end, "kept", ((inner, "re-read"),))
    ref = walk(convs, 6, 6, pol, end, "kept", ((inner, "re-read"),))
    assert (again.skip_buffer_bits, again.buffer_bits) == (ref.skip_live_bits, ref.live_bits)
    # Recomputed, the inner add runs again wherever its tensor is recomputed, and so is its skip read.
    rec = fused_counts(convs, 6, 6, ("fully-recompute",) * 4, end, "re-read", ((inner, "re-read"),))
    assert rec.skip_fetched == walk(convs, 6, 6, ("fully-recompute",) * 4, end, "re-read",
                                    ((inner, "re-read"),)).skip_fetched > 2 * 12 * 12 * 2
    # Tiles of 5 rows: the last tile row (2 rows) computes no new row of the inner add's tensor (the windows of
    # the two convolutions after it reached the bottom before), so keeping the inner skip is refused.
    with pytest.raises(SpecError, match="computing nothing"):
        fused_counts(convs, 5, 6, pol, end, "kept", ((inner, "kept"),))
    assert walk(convs, 5, 6, pol, end, "kept", ((inner, "kept"),)).skip_window_empty
    with pytest.raises(SpecError, match="skip tensor 3"):
        fused_counts(convs, 6, 6, pol, end, "kept", ((Join("bad", 3, 8, 2), "kept"),))


@pytest.mark.parametrize("arch_name", ["eyeriss_like", "tpu_like"])
@settings(max_examples=5, deadline=None)
@given(st.integers(0, 10**9))
def test_simulated_two_block_group_moves_what_the_model_counts(arch_name, seed):
    """Two ResNet-like blocks as one group, each add's skip kept or re-read: the simulator's transfers
    (the re-read skips loaded with the blocks computing their adds' tensors) equal the model's, and the
    pipeline's closed form over the simulator's block cycles is the simulated run."""
    arch = get_accelerator(arch_name)
    bits = {"eyeriss_like": {"I": 16, "W": 16, "O": 16}, "tpu_like": {"I": 8, "W": 8, "O": 32}}[arch_name]
    rng = random.Random(seed)
    h, w, c = rng.randint(5, 9), rng.randint(5, 9), rng.randint(2, 4)
    stages, macs = [], {}
    for i in range(4):
        r = rng.choice([1, 3])
        ms = mac_stage(conv2d(f"c{i}", c=c, h=h, w=w, k=c, r=r, s=r, padding=r // 2, bits=bits))
        macs[i] = ms
        stages.append(ms.stage)
    stages = tuple(stages)
    inner_join = (Join("add1", 0, bits["I"], 2), rng.choice(SKIP_POLICIES))
    end, sp_end = Join("add2", 2, bits["I"]), rng.choice(SKIP_POLICIES)
    tr, tc = rng.randint(1, h), rng.randint(1, w)
    policies = tuple(rng.choice(list(MODES)) for _ in stages)
    mrng = random.Random(seed)
    inner = InnerMappings(lambda op, a: random_mapping(op, a, mrng, check_fit=True))
    g = group_cost(stages, macs, arch, tr, tc, policies, inner, False, end, sp_end, (inner_join,))
    if isinstance(g, str):
        return
    sim = simulate_fused(stages, macs, arch, tr, tc, policies, inner, model_latency=g.latency, join=end,
                         skip_policy=sp_end, inner_joins=(inner_join,))
    assert sim.macs == g.counts.macs
    assert sim.skip_bits == g.counts.skip_fetched * bits["I"] == sum(
        x.offchip_bits for x in g.inner_join_costs + (g.join_cost,))
    assert sim.offchip_bits == g.offchip_bits
    blocks: dict[int, dict[tuple[int, int], tuple[float, int]]] = {j: {} for j in macs}
    for (j, r, cc), got in sim.programs.items():
        blocks[j][(r, cc)] = got
    rows, cols = schedules(stages, tr, tc, policies, end, sp_end, (inner_join,))
    reread = {}
    for jn, sp in (inner_join, (end, sp_end)):
        if sp == "re-read":
            k = jn.target(4) - 1
            reread[k] = reread.get(k, 0) + c * jn.bits
    closed = pipeline_latency(arch.levels[0], blocks, stages, rows, cols, 0, reread)
    assert closed == pytest.approx(sim.cycles, rel=1e-9)


def test_resnet18_blocks_join_into_chains_of_two():
    """ResNet-18's layerN.0 add result feeds layerN.1 (its first convolution and its add) alone: the two
    blocks of each stage become one chain with a join inside; layerN.1's result also feeds the next
    stage's downsampling projection, so chains stop there."""
    m = load_model("resnet18")
    ops = {n: lm.operator for lm in m.layers for n in lm.nodes}
    links = model_chains(bundled_model_path("resnet18"), set(ops))
    chains = span_residual_blocks([c for ls in links for c in fusable_chains(ls, ops)])
    spanned = {c.nodes: (c.inner_joins, c.join) for c in chains if c.inner_joins}
    assert len(spanned) == 4
    inner, end = spanned[("layer1.0.conv1", "layer1.0.conv2", "layer1.1.conv1", "layer1.1.conv2")]
    # layer1.0 adds its input (tensor 0) to conv2's output (tensor 2); layer1.1 adds that sum (tensor 2).
    assert inner == (Join("layer1.0.add", 0, 8, 2),) and end == Join("layer1.1.add", 2, 8)
    inner, end = spanned[("layer2.0.conv1", "layer2.0.conv2", "layer2.1.conv1", "layer2.1.conv2")]
    assert inner[0].skip is None and end.skip == 2       # the projection shortcut comes from outside
