"""A fused group's blocks computed by their own tile programs: each block of a multiply-accumulate stage runs the
single-operator tile program of its tile operator under the mapping the fusion model costed it with, through that
mapping's loops and buffers; the output bit-exact against NumPy, no invalid read, and the counters per level, summed
over the blocks, equal to the cost model's counts of the same blocks (``codegen.fused_blocks``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from accelmap.codegen.fused_blocks import block_level_counts, plan_block_programs  # noqa: E402
from accelmap.codegen.fused_c import run_fused  # noqa: E402
from accelmap.codegen.fused_weights import model_weight_bits, plan_weight_transfers  # noqa: E402
from accelmap.fusion.geometry import fused_counts  # noqa: E402
from accelmap.fusion.group_cost import InnerMappings, group_cost  # noqa: E402
from accelmap.fusion.stages import mac_stage  # noqa: E402
from accelmap.workload import gemm  # noqa: E402
from test_fusion_codegen_heads import _attention  # noqa: E402
from test_fusion_codegen_weights import _arch, _group, _random_search, random_group_cost  # noqa: E402


def _plan(kind: str, seed: int, arch=None):
    if kind == "matmuls":       # O[M][N] += A[M][K] * B[K][N], tokens along M
        macs = {0: mac_stage(gemm("mm0", m=6, n=12, k=8)), 1: mac_stage(gemm("mm1", m=6, n=5, k=12))}
        stages = tuple(ms.stage for ms in macs.values())
    elif kind == "grouped":     # 1x1 > 3x3 of 2 groups > 1x1 of 3 groups (ResNeXt's)
        from accelmap.workload import conv2d
        macs = {0: mac_stage(conv2d("c0", c=2, h=6, w=5, k=4, r=1, s=1)),
                1: mac_stage(conv2d("g1", c=4, h=6, w=5, k=6, r=3, s=3, padding=1, groups=2)),
                2: mac_stage(conv2d("g2", c=6, h=6, w=5, k=3, r=1, s=1, groups=3))}
        stages = tuple(ms.stage for ms in macs.values())
    else:
        stages, macs = _group(kind)
    arch, tile, policies, inner, gc = random_group_cost(stages, macs, seed, arch)
    return stages, macs, arch, tile, policies, inner, gc


def _run_checked(stages, macs, arch, tile, policies, inner, gc, seed: int, head_tile: int | None = None):
    """Build every stage's block programs and weight transfers from the tile mappings ``inner``, run the group and
    check it: every stage through its tile programs, the output bit-exact, no invalid read, the MACs and weight
    bits the model's, every level's counters of every stage (summed over blocks and head tiles) the cost model's.
    Returns (run, programs, the model's counters per level)."""
    progs = plan_block_programs("group", stages, macs, arch, gc, inner)
    assert sorted(progs.programs) == sorted(macs) and not progs.plain
    weights = plan_weight_transfers("group", stages, macs, arch, gc, inner)
    run, ref = run_fused(stages, macs, *tile, policies, seed=seed, weights=weights, programs=progs,
                         head_tile=head_tile)
    assert (run.output == ref).all() and run.invalid_reads == 0
    assert run.macs == fused_counts(stages, *tile, policies, head_tile=head_tile).macs
    assert list(run.weight_bits) == model_weight_bits(gc)
    want = block_level_counts("group", stages, macs, arch, gc, inner)
    assert run.level_counts is not None and sorted(run.level_counts) == sorted(want) == sorted(macs)
    for j, counts in want.items():
        assert (run.level_counts[j] == counts).all(), (j, run.level_counts[j].tolist(), counts.tolist())
    return run, progs, want


@pytest.mark.parametrize("kind,seed", [("convs", 0), ("convs", 4), ("convs", 7), ("dense", 1), ("dense", 5),
                                       ("matmuls", 2), ("matmuls", 3)])
def test_blocks_run_their_tile_mappings_with_the_models_counters_per_level(kind, seed):
    """Two 3x3 / 1x1 convolutions (padded), two dense layers or two matrix products, random tiles, halo modes and
    tile mappings (weight
    tiles refetched inside a block): every block runs its shape's tile program; the output is bit-exact, nothing
    evicted is read, the MACs and the weights' bits fetched are the model's, and every level's counters of every
    operand (fills, reads, updates, drains), summed over the blocks, equal the cost model's."""
    _, _, want = _run_checked(*_plan(kind, seed), seed)
    # the on-chip levels move data: the counters are not trivially equal
    assert all(counts[1:].sum() > 0 for counts in want.values())


def test_blocks_run_with_another_mapping_count_otherwise():
    """The counters follow the mapping each block runs: the same group's blocks built from other tile mappings
    (another random search) count differently per level from the model's blocks, while the output stays exact."""
    stages, macs, arch, tile, policies, inner, gc = _plan("convs", 4)
    other = InnerMappings(_random_search(11))
    assert not isinstance(group_cost(stages, macs, arch, *tile, policies, other), str)
    progs = plan_block_programs("group", stages, macs, arch, gc, other)
    run, ref = run_fused(stages, macs, *tile, policies, seed=4, programs=progs)
    assert (run.output == ref).all() and run.invalid_reads == 0
    want = block_level_counts("group", stages, macs, arch, gc, inner)
    assert run.level_counts is not None
    assert any((run.level_counts[j] != want[j]).any() for j in want)


def test_a_depthwise_convolution_runs_its_tile_programs():
    """A 1x1 convolution then a padded 3x3 depthwise one (MobileNet's expand > depthwise): the depthwise blocks'
    tile operators read I[1][G][window] and W[G][R][S] as a convolution's, so both stages run their tile programs,
    bit-exact, every level's counters the model's."""
    from accelmap.workload import conv2d, depthwise_conv2d
    macs = {0: mac_stage(conv2d("c0", c=2, h=6, w=5, k=3, r=1, s=1)),
            1: mac_stage(depthwise_conv2d("dw", c=3, h=6, w=5, r=3, s=3, padding=1))}
    stages = tuple(ms.stage for ms in macs.values())
    arch = _arch(False, "128 bit")
    inner = InnerMappings(_random_search(0))
    policies = ("fully-cached", "fully-cached")
    gc = group_cost(stages, macs, arch, 3, 5, policies, inner)
    assert not isinstance(gc, str), gc
    progs = plan_block_programs("group", stages, macs, arch, gc, inner)
    assert sorted(progs.programs) == [0, 1] and not progs.plain
    run, ref = run_fused(stages, macs, 3, 5, policies, programs=progs)
    assert (run.output == ref).all() and run.invalid_reads == 0
    want = block_level_counts("group", stages, macs, arch, gc, inner)
    assert run.level_counts is not None and all((run.level_counts[j] == want[j]).all() for j in want)


@pytest.mark.parametrize("heads,rows,tile,head_tile,seed,off_chip", [(2, 4, 2, 1, 1, False), (4, 5, 3, 2, 0, False),
                                                                      (3, 4, 4, 1, 2, False), (4, 4, 2, 2, 3, True)])
def test_a_head_tiled_runs_stages_run_their_tile_programs_per_head_tile(heads, rows, tile, head_tile, seed, off_chip):
    """Attention tiled over heads (``head_tile`` heads at a time): the scores' and context's blocks run, once per head
    tile, the tile program of the head tile's share (its tile operator's batch the head tile, reading the input
    channels and the second operand of its heads), the projections theirs; bit-exact, no invalid read, the MACs and
    the weights' bits the model's, and every stage's counters per level (summed over blocks and head tiles) the
    cost model's. ``off_chip``: on the machine holding no weights on chip (every second operand read from memory at
    each multiply-accumulate, its heads' share per head tile)."""
    stages, macs = _attention(heads, rows)
    policies = ("fully-cached", "fully-recompute", "fully-recompute", "fully-cached")
    arch = _arch(False, None if off_chip else "128 bit")
    inner = InnerMappings(_random_search(seed))
    gc = group_cost(stages, macs, arch, tile, 1, policies, inner, head_tile=head_tile)
    assert not isinstance(gc, str), gc
    _, progs, _ = _run_checked(stages, macs, arch, (tile, 1), policies, inner, gc, seed, head_tile)
    # the products per head run a head tile's share
    assert all(p.operator.sizes["B"] == head_tile for j in (1, 2) for p in progs.programs[j].values())


@pytest.mark.parametrize("heads,rows,tile,seed", [(2, 5, 2, 0), (3, 4, 4, 1)])
def test_attentions_products_per_head_run_their_tile_programs(heads, rows, tile, seed):
    """FLAT's chain (Q projection > scores and context per head > output projection) in row tiles: every stage's
    blocks, the batched products per head included (their tile operators' A[b][M][K] and O[b][M][N] token-major,
    on chip channel b * X + x), run their tile programs; bit-exact, no invalid read, every level's counters the
    cost model's."""
    stages, macs = _attention(heads, rows)
    policies = ("fully-cached", "fully-recompute", "H-cached-V-recompute", "fully-cached")
    arch = _arch(False, "128 bit")
    inner = InnerMappings(_random_search(seed))
    gc = group_cost(stages, macs, arch, tile, 1, policies, inner)
    assert not isinstance(gc, str), gc
    progs = plan_block_programs("group", stages, macs, arch, gc, inner)
    assert sorted(progs.programs) == [0, 1, 2, 3] and not progs.plain
    run, ref = run_fused(stages, macs, tile, 1, policies, seed=seed, programs=progs)
    assert (run.output == ref).all() and run.invalid_reads == 0
    want = block_level_counts("group", stages, macs, arch, gc, inner)
    assert run.level_counts is not None and all((run.level_counts[j] == want[j]).all() for j in want)


@pytest.mark.parametrize("kind,seed", [("convs", 0), ("convs", 3), ("dense", 1), ("matmuls", 2)])
def test_weights_kept_on_no_on_chip_level_are_read_from_memory_as_the_model_charges(kind, seed):
    """No on-chip level keeps the weights (the tile mappings read them from memory at each multiply-accumulate):
    the group still runs fused, streaming them: each block's fetch program reads them at every point of its
    iteration space as its tile mapping does (the bits per stage the model's off-chip weight bits), each block's
    tile program reads them from memory (its outermost level's weight reads, every level's counters the model's),
    and the output is bit-exact."""
    stages, macs, arch, tile, policies, inner, gc = _plan(kind, seed, _arch(False, None))
    assert not gc.weights_resident
    run, _, want = _run_checked(stages, macs, arch, tile, policies, inner, gc, seed)
    for j, ms in macs.items():
        k_w = [o.name for o in ms.operator.operands].index(ms.operator.inputs[1].name)
        reads = int(want[j][0, k_w].sum())
        # every weight bit the stage moves is a read from memory at a multiply-accumulate, at least one per weight
        # element of every block
        assert run.weight_bits[j] == reads * ms.operator.inputs[1].bits
        assert reads >= ms.operator.footprint(ms.operator.inputs[1])


@pytest.mark.parametrize("seed", [0, 2, 5])
def test_a_grouped_convolution_runs_its_tile_programs(seed):
    """A 1x1 convolution then a padded 3x3 convolution of 2 groups (ResNeXt's, I[1][G][C][..], W[G][K][C][R][S],
    O[1][G][K][..]: channel g * C + c, channel-major as on chip, the weights as ONNX stores them) then a 1x1 one of 3
    groups: every stage's blocks run their tile programs (none plain), bit-exact against NumPy, no invalid read, the
    MACs and weight bits the model's, every level's counters the cost model's, on random tiles, halo modes and tile
    mappings."""
    stages, macs, arch, tile, policies, inner, gc = _plan("grouped", seed)
    assert [ms.operator.kind for ms in macs.values()] == ["conv2d", "grouped_conv2d", "grouped_conv2d"]
    _, _, want = _run_checked(stages, macs, arch, tile, policies, inner, gc, seed)
    assert all(counts[1:].sum() > 0 for counts in want.values())
