"""Attention tiled over heads: the head-split stages (scores, softmax, context) run once per head tile inside each
tile of query tokens. The closed forms against the point walk, the cost and the simulator against each other, the
search offering head tiles; and one off-chip port shared by reads and writes."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelmap.arch.presets import get_accelerator
from accelmap.errors import SpecError
from accelmap.fusion.brute_force import walk
from accelmap.fusion.geometry import MODES, AxisMap, Join, Stage, fused_counts, head_segment, schedules
from accelmap.fusion.group_cost import (
    InnerMappings,
    block_shapes,
    group_cost,
    pipeline_latency,
    resident_weight_bits,
    store_index,
)
from accelmap.fusion.search import DEFAULT_FUSION, _enumerate, head_tile_options
from accelmap.mapping.sampling import random_mapping
from accelmap.sim.fused import simulate_fused
from fusion_walk import blocks_agree, simulated_blocks
from test_fusion_relayout import H, T, attention


def attention_stages(rng: random.Random) -> tuple[Stage, ...]:
    """A projection (sometimes with a row window), 1-2 stages split into heads (scores, context) and sometimes a
    projection over all heads after them, on ``tokens`` rows."""
    tokens, heads = rng.randint(3, 7), rng.choice([2, 3, 4, 6])
    width = rng.randint(1, 3)                 # per head
    stages = []
    if rng.random() < 0.7:
        depth, span = rng.randint(1, 4), rng.choice([1, 1, 3])
        pad = span // 2 if rng.random() < 0.7 else 0
        rows_out = tokens + 2 * pad - span + 1
        stages.append(Stage("proj", rows_out, 1, heads * width, tokens, 1, depth, AxisMap(1, span, pad), AxisMap(),
                            heads * width * depth * span, 8, 8))
        tokens = rows_out
    d = heads * width
    for i in range(rng.randint(1, 2)):
        out = heads * rng.randint(1, 4)
        stages.append(Stage(f"h{i}", tokens, 1, out, tokens, 1, d, AxisMap(), AxisMap(), out * (d // heads), 8, 8,
                            heads))
        d = out
    if rng.random() < 0.6:
        span = rng.choice([1, 3])
        pad = span // 2
        stages.append(Stage("out", tokens, 1, 3, tokens, 1, d, AxisMap(1, span, pad), AxisMap(), 3 * d * span, 8, 8))
    return tuple(stages)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9))
def test_head_tiled_counts_equal_the_walk(seed):
    """MACs, input fetched, every tensor's buffer (the scores a head tile at a time, the queries and the context
    whole for the tile) and each stage's blocks (the split ones once per head tile) equal the point walk's, which
    runs each tile step by step: the stages before, the split ones per head tile, the stages after."""
    rng = random.Random(seed)
    stages = attention_stages(rng)
    heads = max(s.heads for s in stages)
    ht = rng.choice([d for d in range(1, heads + 1) if heads % d == 0])
    tr = rng.randint(1, stages[-1].out_rows)
    policies = tuple(rng.choice(list(MODES)) for _ in stages)
    ref = walk(stages, tr, 1, policies, head_tile=ht)
    try:
        model = fused_counts(stages, tr, 1, policies, head_tile=ht)
    except SpecError:
        # Refused only where a scores tensor keeps a halo across tiles (all heads at once, so more than a head
        # tile's share on chip): a window after the run overlapping between tiles, the scores' rows cached.
        inner = [j for j in range(1, len(stages)) if stages[j - 1].heads > 1 and stages[j].heads > 1]
        assert any(MODES[policies[j]][0] for j in inner) and stages[-1].rows.span > 1 and tr < stages[-1].out_rows
        return
    assert model.macs == ref.macs == fused_counts(stages, tr, 1, policies).macs
    assert model.input_fetched == ref.input_fetched
    assert model.buffer_bits == ref.live_bits
    assert model.head_tiles == heads // ht
    seg = head_segment(stages, ht)
    rows, cols = schedules(stages, tr, 1, policies)
    for j in range(len(stages)):
        assert dict(block_shapes(rows, cols, j, seg, model.head_tiles)) == ref.blocks[j]


def test_the_scores_of_one_head_tile_by_hand():
    """4 tokens, 4 heads: Q projection (2 per head) > scores (4 keys per head) > context (2 per head) > output
    projection; one tile of all 4 tokens. The scores hold 4 x 4 x 4 = 64 elements whole, 16 a head at a time;
    the queries and the context stay whole (32 each), every MAC and transfer unchanged."""
    q = Stage("q", 4, 1, 8, 4, 1, 8, AxisMap(), AxisMap(), 64, 8, 8)
    s = Stage("s", 4, 1, 16, 4, 1, 8, AxisMap(), AxisMap(), 16 * 2, 8, 8, 4)
    c = Stage("c", 4, 1, 8, 4, 1, 16, AxisMap(), AxisMap(), 8 * 4, 8, 8, 4)
    y = Stage("y", 4, 1, 8, 4, 1, 8, AxisMap(), AxisMap(), 64, 8, 8)
    pol = ("fully-cached",) * 4
    whole = fused_counts((q, s, c, y), 4, 1, pol)
    one = fused_counts((q, s, c, y), 4, 1, pol, head_tile=1)
    assert [b // 8 for b in whole.buffer_bits] == [32, 32, 64, 32, 32]
    assert [b // 8 for b in one.buffer_bits] == [32, 32, 16, 32, 32]
    assert one.macs == whole.macs and one.head_tiles == 4 and one.tiles == 1
    assert walk((q, s, c, y), 4, 1, pol, head_tile=1).live_bits == one.buffer_bits
    # one clear line where a head tile is not modeled
    with pytest.raises(SpecError, match="does not divide|must divide"):
        fused_counts((q, s, c, y), 4, 1, pol, head_tile=3)
    with pytest.raises(SpecError, match="one run of consecutive stages split into heads"):
        fused_counts((q, y), 4, 1, pol[:2], head_tile=1)
    with pytest.raises(SpecError, match="residual join"):
        fused_counts((q, s, c, y), 4, 1, pol, Join("add", 0, 8), "re-read", head_tile=1)


def _attention_group(tmp_path, seed: int):
    from accelmap.fusion.chain import fusable_chains
    from accelmap.workload.models.bundled import load_model
    from accelmap.workload.models.chains import model_chains

    path = attention(tmp_path / "a.onnx")
    m = load_model(str(path), bits={"I": 8, "W": 8, "O": 32})
    ops = {n: l.operator for l in m.layers for n in l.nodes}
    (links,) = model_chains(path, set(ops))
    (chain,) = fusable_chains(links, ops)
    stages, macs = chain.group(0, 3)          # Q projection > scores > context > output projection
    rng = random.Random(seed)
    return stages, macs, InnerMappings(lambda op, ar: random_mapping(op, ar, rng, check_fit=True))


@pytest.mark.parametrize("shared", [False, True])
def test_the_simulator_runs_head_tiles_as_the_model_counts_them(tmp_path, shared):
    """The small attention (8 tokens, 2 heads) as one group on tpu_like, random block mappings: with one head per
    head tile the split stages' blocks are 1-head operators run twice per tile; the simulator's tiles, MACs and
    off-chip bits equal the model's, the pipeline's recurrence over the simulator's block cycles is the simulated
    run (with one shared off-chip port too), and where every block's cycles agree the latency is the simulator's."""
    arch = get_accelerator("tpu_like")
    if shared:
        top = arch.levels[0]
        arch = replace(arch, levels=(replace(top, write_bw_bits=top.read_bw_bits),) + arch.levels[1:])
    stages, macs, inner = _attention_group(tmp_path, 5)
    other = _attention_group(tmp_path, 6)[2]          # the same group with all heads at once, its own mappings
    assert [s.heads for s in stages] == [1, H, H, 1]
    pol = ("fully-cached",) * 4
    agreed = 0
    for tile, resident in ((T, True), (T // 2, False), (3, True)):
        g = group_cost(stages, macs, arch, tile, 1, pol, inner, resident, head_tile=1, shared_port=shared)
        whole = group_cost(stages, macs, arch, tile, 1, pol, other, resident, shared_port=shared)
        assert not isinstance(g, str) and not isinstance(whole, str) and g.head_tile == 1
        assert g.counts.macs == whole.counts.macs and g.offchip_bits >= 0
        assert g.counts.buffer_bits[2] * H == whole.counts.buffer_bits[2]        # the scores, a head at a time
        assert [sc.tiles for sc in g.stages] == [sc.tiles * (H if j in (1, 2) else 1)
                                                for j, sc in enumerate(whole.stages)]
        sim = simulate_fused(stages, macs, arch, tile, 1, pol, inner, resident, g.latency, head_tile=1,
                             shared_port=shared)
        assert sim.tiles == g.counts.tiles and sim.macs == g.counts.macs
        assert sim.offchip_bits == g.offchip_bits
        blocks = simulated_blocks(sim, macs)
        rows, cols = schedules(stages, tile, 1, pol)
        closed = pipeline_latency(arch.levels[0], blocks, stages, rows, cols,
                                  resident_weight_bits(macs) if resident else 0, None, (1, 2), H, shared)
        assert closed == pytest.approx(sim.cycles, rel=1e-9)
        if blocks_agree(g, sim):
            assert g.latency == pytest.approx(sim.cycles, rel=1e-12)
            agreed += 1
    assert agreed >= 1


def test_one_shared_port_serves_loads_and_write_backs_in_program_order():
    """Two tiles of one block each, by hand: loads 10 and 10 cycles, blocks 30, write-backs 20. A port each way
    overlaps the second load with the first block (10 + 30 + 30 + 20 = 90); one port serves load, write-back,
    load, write-back (10 + 30 + 20 + 10 + 30 + 20 = 120). Unequal bandwidths cannot be one port: one clear line."""
    arch = get_accelerator("tpu_like")
    top = replace(arch.levels[0], read_bw_bits=8.0, write_bw_bits=8.0)
    st_ = Stage("a", 2, 1, 2, 2, 1, 1, AxisMap(), AxisMap(), 2, 80, 80)      # one row: 80-bit input, 160-bit output
    rows, cols = schedules((st_,), 1, 1, ("fully-cached",))
    blocks = {0: {(1, 1): (30.0, 0)}}
    assert pipeline_latency(top, blocks, (st_,), rows, cols, 0) == 90.0
    assert pipeline_latency(top, blocks, (st_,), rows, cols, 0, shared_port=True) == 120.0
    with pytest.raises(SpecError, match="read and write bandwidths equal"):
        pipeline_latency(replace(top, write_bw_bits=4.0), blocks, (st_,), rows, cols, 0, shared_port=True)


def test_the_search_offers_the_largest_head_tile_that_fits(tmp_path):
    """With a store too small for all heads' scores of every query token at once, the default search's largest
    row tile comes with the largest head tile whose buffers fit; the exact search offers every divisor."""
    stages, macs, _ = _attention_group(tmp_path, 1)
    assert head_tile_options(stages, None, (), DEFAULT_FUSION) == [None, 1]
    assert head_tile_options(stages, None, (), replace(DEFAULT_FUSION, head_tiles=False)) == [None]
    arch = get_accelerator("tpu_like")
    pol = ("fully-cached",) * 4
    whole = fused_counts(stages, T, 1, pol).buffer_total_bits
    one = fused_counts(stages, T, 1, pol, head_tile=1).buffer_total_bits
    assert one < whole
    s = store_index(arch)
    small = replace(arch, levels=arch.levels[:s] + (replace(arch.levels[s], capacity_bits=64 * (whole // 64)),)
                    + arch.levels[s + 1:])
    cands = [c for c in _enumerate(stages, macs, small, None, DEFAULT_FUSION, False) if not c.resident]
    assert (T, 1) in {(c.tile_rows, c.head_tile) for c in cands}
    assert (T, None) not in {(c.tile_rows, c.head_tile) for c in cands}
