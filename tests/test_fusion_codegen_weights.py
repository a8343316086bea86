"""The weights' transfers of a fused group's emitted C: resident (fetched into the store once) or streamed (each
block fetching what its own tile mapping moves from memory), counted per stage and equal to what the fusion model
charges (``fusion.group_cost``), on random tile mappings that refetch weight tiles inside a block."""

from __future__ import annotations

import random

import pytest

from accelmap.arch import accelerator_from_dict
from accelmap.codegen.fused_c import run_fused
from accelmap.codegen.fused_weights import model_weight_bits, plan_weight_transfers
from accelmap.fusion.geometry import MODES
from accelmap.fusion.group_cost import InnerMappings, group_cost
from accelmap.fusion.stages import mac_stage
from accelmap.mapping.sampling import random_mapping
from accelmap.workload import conv2d, dense


def _arch(store_weights: bool, weight_buffer: str | None):
    """Off-chip memory, a store (one instance: the group's intermediates), a small weight buffer, and a 2x2 array of
    PEs with registers: a weight tile of a block larger than the buffer is fetched in parts, again where the loops
    above it revisit it. ``weight_buffer`` None: no weight buffer and no on-chip level holding weights (every mapping
    reads them from memory at each multiply-accumulate, once per multicast group of the array, then under the
    store)."""
    fanout = {"fanout": {"axes": [{"name": "X", "size": 2, "multicast": True, "reduce": True}]}}
    weights = [] if weight_buffer is None else [
        {"name": "WB", "holds": ["W"], "capacity": weight_buffer, "width": "8 bit", "read_energy": "2 pJ",
         "write_energy": "2 pJ", "bypass": False, **fanout}]
    return accelerator_from_dict({
        "name": "fusetest",
        "compute": {"mac_energy": "1 pJ", "precision": {"I": [8, 16], "W": [8, 16], "O": [16, 32]}},
        "levels": [
            {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "64 bit",
             "read_energy": "100 pJ", "write_energy": "100 pJ", "read_bandwidth": "64 bit/cycle",
             "write_bandwidth": "64 bit/cycle"},
            {"name": "GB", "holds": ["I", "O", "W"] if store_weights else ["I", "O"], "capacity": "64 KiB",
             "width": "64 bit", "read_energy": "10 pJ", "write_energy": "10 pJ",
             **(fanout if weight_buffer is None else {})},
            *weights,
            {"name": "RF", "holds": ["I", "W", "O"] if weight_buffer is not None else ["I", "O"],
             "capacity": "unbounded", "width": "16 bit", "read_energy": "1 pJ", "write_energy": "1 pJ"},
        ]})


def _random_search(seed: int):
    rng = random.Random(seed)

    def search(op, arch):
        return random_mapping(op, arch, rng, imperfect=rng.random() < 0.5, check_fit=True)
    return search


def random_group_cost(stages, macs, seed: int, arch=None):
    """A drawn tile, halo mode per stage and random tile mappings for the group on ``arch`` (the 128-bit machine by
    default), and its cost: (arch, tile, policies, inner mappings, group cost)."""
    arch = arch or _arch(False, "128 bit")
    rng = random.Random(seed)
    last = stages[-1]
    tile = (rng.randint(1, last.out_rows), rng.randint(1, last.out_cols))
    policies = tuple(rng.choice(list(MODES)) for _ in stages)
    inner = InnerMappings(_random_search(seed))
    gc = group_cost(stages, macs, arch, *tile, policies, inner)
    assert not isinstance(gc, str), gc
    return arch, tile, policies, inner, gc


def _group(kind: str):
    if kind == "convs":
        macs = {0: mac_stage(conv2d("c0", c=3, h=6, w=5, k=4, r=3, s=3, padding=1)),
                1: mac_stage(conv2d("c1", c=4, h=6, w=5, k=3, r=1, s=1))}
    else:
        macs = {0: mac_stage(dense("fc1", n=6, c=8, k=12)), 1: mac_stage(dense("fc2", n=6, c=12, k=5))}
    return tuple(ms.stage for ms in macs.values()), macs


# (group, seed): draws whose tile mappings refetch weight tiles inside a block (more bits than the weights' size
# times the blocks), with different tiles and halo modes
STREAMED = [("convs", 0), ("convs", 4), ("dense", 1), ("dense", 5)]


@pytest.mark.parametrize("kind,seed", STREAMED)
def test_streamed_weights_are_fetched_by_each_blocks_mapping_as_the_model_charges(kind, seed):
    """Streamed: each block runs its tile mapping's weight fetches into the weight buffer; the bits fetched per
    stage equal the model's off-chip weight bits, which here exceed the weights' size times the blocks (the
    mapping refetches tiles inside a block: the counter follows it, not the tensor's size); output bit-exact."""
    stages, macs = _group(kind)
    arch, tile, policies, inner, gc = random_group_cost(stages, macs, seed)
    plan = plan_weight_transfers("group", stages, macs, arch, gc, inner)
    run, ref = run_fused(stages, macs, *tile, policies, seed=seed, weights=plan)
    assert (run.output == ref).all() and run.invalid_reads == 0
    assert list(run.weight_bits) == model_weight_bits(gc)
    blocks = [sum(times for _, _, times, _, _ in s.blocks) for s in gc.stages]
    once = [ms.operator.footprint(ms.operator.inputs[1]) * ms.operator.inputs[1].bits for ms in macs.values()]
    assert all(b >= n * w for b, n, w in zip(run.weight_bits, blocks, once, strict=True))
    assert any(b > n * w for b, n, w in zip(run.weight_bits, blocks, once, strict=True))


def test_resident_weights_are_fetched_once_into_the_store():
    """Resident: every stage's weights fetched once into the store before the first tile, the blocks reading that
    copy (bit-exact), the bits the model's (the weights' size, whatever the tiles)."""
    stages, macs = _group("convs")
    arch = _arch(True, "1 KiB")
    inner = InnerMappings(_random_search(5))
    gc = group_cost(stages, macs, arch, 2, 5, ("fully-cached", "H-cached-V-recompute"), inner, weights_resident=True)
    assert not isinstance(gc, str), gc
    plan = plan_weight_transfers("group", stages, macs, arch, gc, inner)
    run, ref = run_fused(stages, macs, 2, 5, ("fully-cached", "H-cached-V-recompute"), weights=plan)
    assert (run.output == ref).all()
    assert list(run.weight_bits) == model_weight_bits(gc) == [108 * 8, 12 * 8]


def _fetch_counts(op, arch, m, fetched: frozenset[str], seed: int):
    """The outermost level's counters of every operand (``[operands][4]``) of the fetch program of ``fetched`` run
    on random integers, and the cost model's counts of the whole mapping."""
    import numpy as np

    from accelmap.codegen import compile_shared, generate_c, load_run
    from accelmap.codegen.c_tensors import random_inputs
    from accelmap.codegen.execute import run_generated
    from accelmap.cost import access_counts
    fn = load_run(compile_shared(generate_c(op, arch, m, fetched_only=fetched), opt="-O0"))
    _, counters = run_generated(fn, op, random_inputs(op, "int", np.random.default_rng(seed)), len(arch.levels))
    return counters[0], access_counts(op, arch, m)


def test_a_weight_kept_on_no_on_chip_level_is_fetched_at_each_multiply_accumulate():
    """A tile mapping reading its weights from memory at every multiply-accumulate has no tile to fetch: the fetch
    program reads them at each point of the iteration space, once per multicast group, as the whole program does;
    here every MAC (2 x 2 x 3 = 12 reads of W) and nothing else."""
    from accelmap.mapping.loopnest import Loop, Mapping
    arch = accelerator_from_dict({
        "name": "bypass", "compute": {"mac_energy": "1 pJ", "precision": {"I": [8], "W": [8], "O": [32]}},
        "levels": [{"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit"},
                   {"name": "RF", "holds": ["I", "O"], "capacity": "unbounded", "width": "8 bit"}]})
    op = dense("fc", n=2, c=3, k=2)
    m = Mapping((Loop("N", 2, 0), Loop("K", 2, 0), Loop("C", 3, 1)),
                (frozenset({"I", "W", "O"}), frozenset({"I", "O"})))
    counters, model = _fetch_counts(op, arch, m, frozenset({"W"}), 0)
    k = [x.name for x in op.operands].index("W")
    assert tuple(int(v) for v in counters[k]) == model[(0, "W")].as_tuple() == (0, 12, 0, 0)
    assert int(counters.sum()) == 12        # the other operands are not moved


def _draws(seed: int, tries: int, wanted):
    """(operator, accelerator, mapping, the inputs ``wanted(op, arch, m)`` names): one random draw per operator of the
    codegen tests (strides, dilation, padding, groups, three inputs, prior outputs; multicast and imperfect factors as
    drawn) for which it names some, drawn from ``random.Random(seed * n)`` for the n-th operator."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from accelmap.errors import MappingError
    from test_codegen import OPERATORS, _random_arch
    out = []
    for n, op in enumerate(OPERATORS):
        r = random.Random(seed * n)
        for _ in range(tries):
            arch = _random_arch(r)
            try:
                m = random_mapping(op, arch, r, imperfect=r.random() < 0.5)
            except MappingError:
                continue
            names = wanted(op, arch, m)
            if names:
                out.append((op, arch, m, names))
                break
    return out


def _on_chip(op, arch, m) -> frozenset[str]:
    """The inputs some on-chip level keeps."""
    return frozenset(x.name for x in op.inputs if any(x.name in m.keep[i] for i in range(1, len(arch.levels))))


def _nowhere_on_chip(op, arch, m) -> frozenset[str]:
    """The inputs no on-chip level keeps (read from memory at every multiply-accumulate)."""
    return frozenset(x.name for x in op.inputs) - _on_chip(op, arch, m)


FETCH_CASES = _draws(77, 50, _on_chip)
MAC_READ_CASES = _draws(91, 100, _nowhere_on_chip)


@pytest.mark.parametrize("k", range(len(MAC_READ_CASES)), ids=lambda k: MAC_READ_CASES[k][0].name)
def test_a_fetch_of_an_operand_kept_nowhere_on_chip_counts_the_models_reads(k):
    """``generate_c(..., fetched_only=)`` of every input (those kept on chip by their tiles, those kept nowhere by
    their reads at each multiply-accumulate): the outermost level's counters of each equal the cost model's."""
    op, arch, m, nowhere = MAC_READ_CASES[k]
    every = frozenset(x.name for x in op.inputs)
    counters, model = _fetch_counts(op, arch, m, every, k)
    for j, x in enumerate(op.operands):
        if x.name in every:
            assert tuple(int(v) for v in counters[j]) == model[(0, x.name)].as_tuple(), x.name
    assert any(model[(0, x)].as_tuple()[1] > 0 for x in nowhere)


def test_the_random_draws_include_operands_kept_nowhere_on_chip():
    assert len(MAC_READ_CASES) >= 5


@pytest.mark.parametrize("k", range(len(FETCH_CASES)), ids=lambda k: FETCH_CASES[k][0].name)
def test_a_fetch_only_program_counts_what_the_whole_program_moves_from_memory(k):
    """``generate_c(..., fetched_only=)``: the loops above the first on-chip level keeping each fetched operand and
    its tile transfers alone; its counters at the outermost level equal the cost model's for those operands."""
    op, arch, m, kept = FETCH_CASES[k]
    counters, model = _fetch_counts(op, arch, m, kept, k)
    for j, x in enumerate(op.operands):
        if x.name in kept:
            assert tuple(int(v) for v in counters[j]) == model[(0, x.name)].as_tuple()
