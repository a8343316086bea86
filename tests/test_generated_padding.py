"""``padding: generated``: a tile that spans a whole padded axis moves the stored rows only (ZigZag's
convention, which caps a tile's extent at the stored extent), where ``moved`` (the default) moves the
padded halo like data."""

import random

import numpy as np
import pytest

from accelmap.arch import accelerator_from_dict
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.brute_force_counts import reference_counts
from accelmap.cost.model import access_counts, evaluate
from accelmap.errors import SpecError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.sim import simulate
from accelmap.workload import conv2d


def machine(padding: str | None):
    spec = {"name": "halo", "compute": {"mac_energy": "1 pJ"}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "read_energy": "100 pJ",
         "read_bandwidth": "16 bit/cycle"},
        {"name": "BUF", "holds": ["I", "W", "O"], "capacity": "unbounded", "read_energy": "1 pJ",
         "read_bandwidth": "64 bit/cycle"}]}
    if padding:
        spec["padding"] = padding
    return accelerator_from_dict(spec)


# 2 channels of 6 x 6 pixels, 3 x 3 kernel, padding 1: the index space is 2 x 8 x 8
OP = conv2d("c", c=2, h=6, w=6, k=2, r=3, s=3, padding=1)
KEEP = (frozenset({"I", "W", "O"}), frozenset({"I", "W", "O"}))


def _mapping(p_above: int):
    inner = [Loop("K", 2, 1), Loop("C", 2, 1), Loop("P", 6 // p_above, 1), Loop("Q", 6, 1), Loop("R", 3, 1),
             Loop("S", 3, 1)]
    return Mapping(tuple([Loop("P", p_above, 0)] if p_above > 1 else []) + tuple(inner), KEEP)


@pytest.mark.parametrize("p_above, moved, generated", [
    (1, 2 * 8 * 8, 2 * 6 * 6),      # BUF holds the whole input: the halo is generated on both axes
    (2, 2 * 8 * 8, 2 * 8 * 6),      # rows in two tiles of 5 padded rows (3 new): rows keep their halo
])
def test_fills_of_a_tile_spanning_whole_padded_axes(p_above, moved, generated):
    op = adopt_precision(OP, machine(None))
    I = op.inputs[0].name
    m = _mapping(p_above)
    for arch, want in [(machine(None), moved), (machine("moved"), moved), (machine("generated"), generated)]:
        c = access_counts(op, arch, m)
        assert c[(1, I)].fills == want and c[(0, I)].reads == want
        assert c == reference_counts(op, arch, m)


def test_the_simulator_follows_the_generated_halo():
    arch = machine("generated")
    op = adopt_precision(OP, arch)
    m = _mapping(2)
    r = evaluate(op, arch, m)
    assert r.latency < evaluate(op, machine(None), m).latency
    assert simulate(op, arch, m, functional=False).cycles == pytest.approx(r.latency, rel=0.02)


def test_a_bad_padding_value_is_one_clear_line():
    with pytest.raises(SpecError, match="padding: 'zeros' is not valid; use moved"):
        machine("zeros")


def test_generated_c_counts_the_generated_halo_as_the_model():
    from accelmap.codegen import compile_shared, generate_c, load_run
    from accelmap.codegen.c_tensors import random_inputs, reference
    from accelmap.codegen.execute import run_generated
    from accelmap.mapping.sampling import random_mapping
    from test_codegen import OPERATORS

    arch = machine("generated")
    rng = random.Random(3)
    checked = 0
    for k, base in enumerate([OP] + [o for o in OPERATORS if any(any(x.pad_lo) for x in o.inputs if x.pad_lo)]):
        op = adopt_precision(base, arch)
        for m in [_mapping(1)] if k == 0 else [random_mapping(op, arch, rng, imperfect=bool(j)) for j in (0, 1)]:
            fn = load_run(compile_shared(generate_c(op, arch, m), opt="-O0"))
            tensors = random_inputs(op, "int", np.random.default_rng(k))
            got, counters = run_generated(fn, op, tensors, len(arch.levels))
            assert np.array_equal(got, reference(op, tensors))
            code = {(i, X.name): tuple(int(v) for v in counters[i, j]) for i in range(len(arch.levels))
                    for j, X in enumerate(op.operands) if X.name in m.keep[i]}
            assert code == {key: c.as_tuple() for key, c in access_counts(op, arch, m).items()}
            checked += 1
    assert checked >= 5
