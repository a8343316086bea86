"""Attention tiled over heads in the emitted C of a fused group: within each tile of tokens, the scores and the
context run once per head tile (each block on that many heads, the scores held a head tile at a time), bit-exact
against NumPy, nothing read that the head tile does not hold, and every counter (input fetched, output written,
MACs, the weights' bits the blocks fetch) equal to the fusion model's with that head tile."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from accelmap.codegen.fused_c import run_fused  # noqa: E402
from accelmap.codegen.fused_weights import model_weight_bits, plan_weight_transfers  # noqa: E402
from accelmap.errors import SpecError  # noqa: E402
from accelmap.fusion.geometry import Join, fused_counts  # noqa: E402
from accelmap.fusion.group_cost import InnerMappings, group_cost  # noqa: E402
from accelmap.fusion.stages import mac_stage  # noqa: E402
from accelmap.workload import batched_matmul, gemm  # noqa: E402
from test_fusion_codegen_weights import _arch, _random_search  # noqa: E402


def _attention(heads: int, rows: int):
    """FLAT's chain: Q projection > scores and context per head > output projection."""
    d, dh = 2 * heads, 2
    macs = {0: mac_stage(gemm("q", m=rows, n=d, k=d)),
            1: mac_stage(batched_matmul("scores", batch=heads, m=rows, n=rows, k=dh)),
            2: mac_stage(batched_matmul("context", batch=heads, m=rows, n=dh, k=rows)),
            3: mac_stage(gemm("out", m=rows, n=d, k=d))}
    return tuple(macs[j].stage for j in range(4)), macs


@pytest.mark.parametrize("heads,head_tile,rows,tile,seed", [(4, 1, 5, 2, 0), (4, 2, 6, 4, 1), (3, 3, 4, 4, 2)])
def test_head_tiles_in_the_emitted_c_are_bit_exact_and_count_what_the_model_counts(heads, head_tile, rows, tile, seed):
    stages, macs = _attention(heads, rows)
    policies = ("fully-cached", "fully-recompute", "H-cached-V-recompute", "fully-cached")
    arch = _arch(False, "128 bit")
    inner = InnerMappings(_random_search(seed))
    gc = group_cost(stages, macs, arch, tile, 1, policies, inner, head_tile=head_tile)
    assert not isinstance(gc, str), gc
    assert gc.head_tile == head_tile and gc.counts.head_tiles == heads // head_tile
    plan = plan_weight_transfers("group", stages, macs, arch, gc, inner)
    run, ref = run_fused(stages, macs, tile, 1, policies, seed=seed, weights=plan, head_tile=head_tile)
    assert run.invalid_reads == 0 and (run.output == ref).all()
    model = fused_counts(stages, tile, 1, policies, head_tile=head_tile)
    assert (run.input_fetched, run.output_written, run.macs) == (model.input_fetched, model.output_written,
                                                                  model.macs)
    # the blocks of the head-split stages fetch their heads' share of K and V, once per head tile, as mapped
    assert list(run.weight_bits) == model_weight_bits(gc)
    assert set(plan.streamed[1]) == {(r, 1) for r in {min(tile, rows - i) for i in range(0, rows, tile)}}


def test_a_head_tile_with_a_residual_join_is_refused_in_one_line():
    stages, macs = _attention(2, 4)
    with pytest.raises(SpecError, match="head tile in a group with a residual join"):
        run_fused(stages, macs, 2, 1, ("fully-cached",) * 4, join=Join("residual", 0, 16), head_tile=1)


def test_every_head_tile_recomputes_nothing_and_reads_only_its_heads():
    """Against the same chain without head tiles: the same output, MACs and transfers (the heads are independent:
    the same positions are computed, fetched and written), whatever the head tile."""
    stages, macs = _attention(4, 5)
    policies = ("fully-cached",) * 4
    base, ref = run_fused(stages, macs, 3, 1, policies, seed=3)
    for ht in (1, 2):
        run, _ = run_fused(stages, macs, 3, 1, policies, seed=3, head_tile=ht)
        assert (run.output == base.output).all() and (base.output == ref).all()
        assert (run.macs, run.input_fetched, run.output_written, run.invalid_reads) == (
            base.macs, base.input_fetched, base.output_written, 0)
