"""The vector unit (``compute.vector_elements_per_cycle``): a normalization between two operators takes its
elements over it, alone (beside its off-chip read and write) and inside a fused group (after each block that writes
the elements, before the next block), the same in the model and in the simulator."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from accelmap.arch import accelerator_from_dict
from accelmap.arch.presets import get_accelerator
from accelmap.fusion.chain import fusable_chains
from accelmap.fusion.geometry import fused_counts, schedules
from accelmap.fusion.group_cost import InnerMappings, group_cost, group_lower_bound, vector_cycles
from accelmap.fusion.search import norms_alone
from accelmap.mapping.sampling import random_mapping
from accelmap.sim.fused import simulate_fused
from accelmap.workload.models.bundled import load_model
from accelmap.workload.models.chains import model_chains
from fusion_walk import blocks_agree
from test_fusion_relayout import H, T, attention


def _with_vector(arch, rate):
    return replace(arch, compute=replace(arch.compute, vector_elements_per_cycle=rate))


def _chain(tmp_path):
    path = attention(tmp_path / "a.onnx")
    m = load_model(str(path), bits={"I": 8, "W": 8, "O": 32})
    ops = {n: lv.operator for lv in m.layers for n in lv.nodes}
    (links,) = model_chains(path, set(ops))
    (chain,) = fusable_chains(links, ops)
    return chain


def test_the_accelerator_format_reads_the_vector_unit():
    spec = {"name": "v", "compute": {"mac_energy": "1 pJ", "vector_elements_per_cycle": 512}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded"}]}
    assert accelerator_from_dict(spec).compute.vector_elements_per_cycle == 512
    assert vector_cycles(accelerator_from_dict(spec), 1024) == 2.0
    del spec["compute"]["vector_elements_per_cycle"]
    assert vector_cycles(accelerator_from_dict(spec), 1024) == 0.0
    spec["compute"]["vector_elements_per_cycle"] = 0
    with pytest.raises(Exception, match="vector_elements_per_cycle"):
        accelerator_from_dict(spec)


def test_a_softmax_alone_takes_the_slower_of_its_port_and_its_elements(tmp_path):
    # The scores are T x T per head, H heads: 128 elements, read at 32 bits and written at 8 over tpu_like's DRAM
    # (128 bits per cycle each way): 32 and 8 cycles. At 1 element per cycle the vector unit takes 128.
    chain = _chain(tmp_path)
    assert chain.norm_elements(2) == H * T * T == 128
    arch = get_accelerator("tpu_like")
    for rate, want in ((None, 32.0), (64, 32.0), (1, 128.0)):
        (norm,) = norms_alone(chain, _with_vector(arch, rate))[2]
        assert norm.latency == want


@pytest.mark.parametrize("head_tile", [None, 1])
def test_inside_a_group_each_block_is_followed_by_its_softmax(tmp_path, head_tile):
    # Q projection > scores > softmax > context as one group on tpu_like (random block mappings, the same ones with
    # and without the vector unit): each scores block adds its elements at 2 per cycle to its stage and to the run;
    # the simulator runs the same and its cycles are the pipeline's.
    chain = _chain(tmp_path)
    stages, macs = chain.group(0, 2)
    norms = chain.group_norms(0, 2)
    assert norms == ((1, 1),)                  # after the scores (stage 1), one softmax
    arch = get_accelerator("tpu_like")
    fast = _with_vector(arch, 2)
    pol = ("fully-cached",) * 3
    agreed = 0
    for tile in (T, T // 2):
        picked: dict = {}

        def mapping(op, ar, picked=picked):
            key = (op.signature(), ar.levels[store_index_of(ar)].capacity_bits)
            if key not in picked:
                picked[key] = random_mapping(op, ar, random.Random(len(picked)), check_fit=True)
            return picked[key]

        inner = InnerMappings(mapping)
        base = group_cost(stages, macs, arch, tile, 1, pol, inner, True, head_tile=head_tile, norms=norms)
        timed = group_cost(stages, macs, fast, tile, 1, pol, inner, True, head_tile=head_tile, norms=norms)
        assert not isinstance(base, str) and not isinstance(timed, str)
        assert timed.norms == norms and timed.energy == base.energy
        # every scores element of the layer once: H x T x T at 2 per cycle
        assert timed.stages[1].latency - base.stages[1].latency == pytest.approx(H * T * T / 2, rel=1e-12)
        assert [s.latency for j, s in enumerate(timed.stages) if j != 1] == \
            [s.latency for j, s in enumerate(base.stages) if j != 1]
        assert timed.latency >= base.latency
        sim = simulate_fused(stages, macs, fast, tile, 1, pol, inner, True, timed.latency, head_tile=head_tile,
                             norms=norms)
        plain = simulate_fused(stages, macs, fast, tile, 1, pol, inner, True, head_tile=head_tile)
        assert sim.compute_cycles - plain.compute_cycles == pytest.approx(H * T * T / 2, rel=1e-12)
        assert sim.cycles >= plain.cycles
        if blocks_agree(timed, sim):
            assert timed.latency == pytest.approx(sim.cycles, rel=1e-12)
            agreed += 1
        # the group's lower bound adds the same passes: still below the cost, above the bound without them
        counts = fused_counts(stages, tile, 1, pol, head_tile=head_tile)
        rows, cols = schedules(stages, tile, 1, pol)
        low = group_lower_bound(stages, macs, fast, counts, rows, cols, True, head_tile=head_tile, norms=norms)
        plain_low = group_lower_bound(stages, macs, fast, counts, rows, cols, True, head_tile=head_tile)
        assert low[0] == plain_low[0] and low[0] <= timed.energy
        assert plain_low[1] <= low[1] <= timed.latency * (1 + 1e-12)
        assert low[1] >= H * T * T / 2
    assert agreed >= 1


def store_index_of(arch) -> int:
    from accelmap.fusion.group_cost import store_index
    return store_index(arch)
