"""``refill_while_read``: a level double-buffered when two tiles fit that, when they do not, writes its
next tile as the current one's elements are read for the last time (ZigZag's rule for a memory it does
not double-buffer). Where the outermost loop inside the level's tiles moves every operand it keeps, each
tile is read through once and the refill overlaps that pass; a loop over other dims on top re-reads the
tile, and the level stalls as a single buffer. The model must equal the simulator in every case."""

from __future__ import annotations

import numpy as np
import pytest

from accelmap.arch import accelerator_from_dict
from accelmap.cost import evaluate
from accelmap.cost.batch import evaluate_batch
from accelmap.errors import SpecError
from accelmap.mapping import parse_text
from accelmap.sim import simulate
from accelmap.workload import gemm


def _arch(refill: bool = True, capacity: str = "16 B", buffering="when_fits", setup: int = 0):
    # B (the W operand) loads from DRAM into Buf at one word per cycle; the compute reads it from Buf
    buf = {"name": "Buf", "holds": ["W"], "capacity": capacity, "width": "8 bit", "write_bandwidth": "1 words/cycle",
           "double_buffered": buffering, "bypass": False, "transfer_setup_cycles": setup}
    if refill:
        buf["refill_while_read"] = True
    return accelerator_from_dict({"name": "refill", "compute": {"mac_energy": "1 pJ"}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit"}, buf]})


OP = gemm("g", m=2, n=4, k=16)
# 8 tiles of B (16 words, 16 cycles to load), each read over 16 one-MAC steps
READ_ONCE = "DRAM [ O A B ]\n| for M in [0:2)\n| for N in [0:4)\nBuf [ B ]\n| for K in [0:16)\n"
# 4 tiles, each read twice (M on top, over a dim B does not use): 32 steps each
READ_TWICE = "DRAM [ O A B ]\n| for N in [0:4)\nBuf [ B ]\n| for M in [0:2)\n| for K in [0:16)\n"
# 4 tiles of 32 steps, the outermost loop inside (K) moving B: read through once
READ_ONCE_INNER_M = "DRAM [ O A B ]\n| for N in [0:4)\nBuf [ B ]\n| for K in [0:16)\n| for M in [0:2)\n"


@pytest.mark.parametrize("nest, refill, capacity, cycles", [
    # the first load (16), then every tile's load hidden behind the previous tile's 16 steps
    (READ_ONCE, True, "16 B", 16 + 8 * 16),
    # a single buffer: every tile loads, then computes
    (READ_ONCE, False, "16 B", 8 * (16 + 16)),
    # two tiles fit: double-buffered either way
    (READ_ONCE, False, "32 B", 16 + 8 * 16),
    # a tile read twice cannot be overwritten during its first pass: the level stalls
    (READ_TWICE, True, "16 B", 4 * (16 + 32)),
    (READ_TWICE, False, "16 B", 4 * (16 + 32)),
    (READ_ONCE_INNER_M, True, "16 B", 16 + 4 * 32),
    (READ_ONCE_INNER_M, False, "16 B", 4 * (16 + 32)),
])
def test_model_equals_simulator(nest, refill, capacity, cycles):
    a = _arch(refill, capacity)
    m = parse_text(nest, a)
    res = simulate(OP, a, m, functional=False)
    assert res.cycles == cycles
    assert res.model_latency == cycles
    assert evaluate(OP, a, m).latency == cycles


def test_batch_rows_equal_the_model_of_one_mapping():
    # the batch evaluator decides the overlap per row by the same function
    a = _arch()
    keep = (frozenset({"A", "B", "O"}), frozenset({"B"}))
    structure = [("M", 0, None), ("N", 0, None), ("K", 0, None), ("M", 1, None), ("K", 1, None), ("M", 1, None)]
    B = np.array([[2, 4, 1, 1, 16, 1], [1, 4, 1, 2, 16, 1], [1, 4, 1, 1, 16, 2], [2, 4, 2, 1, 8, 1]])
    out = evaluate_batch(OP, a, structure, keep, B)
    # the last row: 16 tiles of 8 words, each read over 8 steps
    assert out["latency"].tolist() == [144.0, 192.0, 144.0, 8 + 16 * 8]
    for row, lat in zip(B.tolist(), out["latency"].tolist(), strict=True):
        text = "DRAM [ O A B ]\n" + "".join(f"| for {d} in [0:{b})\n" for (d, lv, _), b in zip(structure, row, strict=True)
                                            if lv == 0 and b > 1)
        text += "Buf [ B ]\n" + "".join(f"| for {d} in [0:{b})\n" for (d, lv, _), b in zip(structure, row, strict=True)
                                        if lv == 1 and b > 1)
        assert evaluate(OP, a, parse_text(text, a)).latency == lat


def test_only_with_double_buffering_when_tiles_fit():
    with pytest.raises(SpecError, match="refill_while_read.*when_fits"):
        _arch(buffering=False)
    with pytest.raises(SpecError, match="refill_while_read.*when_fits"):
        _arch(buffering=True)


def test_generated_c_is_the_same_program():
    """The property times the refills and changes no data movement: the generated C computes NumPy's
    result and counts the model's accesses."""
    from accelmap.codegen import compile_shared, generate_c, load_run
    from accelmap.codegen.c_tensors import random_inputs, reference
    from accelmap.codegen.execute import run_generated
    from accelmap.cost import access_counts

    a = _arch()
    m = parse_text(READ_ONCE, a)
    fn = load_run(compile_shared(generate_c(OP, a, m), opt="-O0"))
    tensors = random_inputs(OP, "int", np.random.default_rng(0))
    got, counters = run_generated(fn, OP, tensors, len(a.levels))
    assert np.array_equal(got, reference(OP, tensors))
    code = {(i, X.name): tuple(int(v) for v in counters[i, j]) for i in range(len(a.levels))
            for j, X in enumerate(OP.operands) if X.name in m.keep[i]}
    assert code == {key: c.as_tuple() for key, c in access_counts(OP, a, m).items()}


def test_the_exact_mapper_finds_the_exhaustive_optimum():
    """With a DMA setup per tile, larger tiles pay and their loop order decides whether the refill
    overlaps: the exact search returns the exhaustive optimum (148 mappings)."""
    from accelmap.search.exhaustive import search_exhaustive
    from accelmap.search.optimal import search_optimal

    a = _arch(setup=8)
    every, stats = search_exhaustive(OP, a, "latency")
    best, _ = search_optimal(OP, a, "latency")
    assert stats.evaluated == 148
    assert best[0].value == every[0].value == 144
