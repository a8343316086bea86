"""One test per geometric term of the latency model (cost/nest_rows.py, cost/latency.py), each
against a brute-force count over the loop nest. The terms are defined once over NumPy rows; the
model of one mapping runs them on one row, the batch evaluator on many."""

import itertools
import math

import numpy as np
from hypothesis import given, settings

from accelmap.cost.latency import pipeline_counts, tile_transfer_rows
from accelmap.cost.nest_rows import NestRows
from accelmap.cost.brute_force_counts import reference_counts
from accelmap.mapping.loopnest import loop_strides

from strategies import mapped_problems

MAX_STEPS = 4000


def _above(m, c):
    return [i for i, l in enumerate(m.loops) if not l.spatial and l.level < c]


def _walk(m, loops):
    """Every iteration of ``loops`` (indices into m.loops), outermost first, as index tuples."""
    return itertools.product(*(range(m.loops[i].bound) for i in loops))


@settings(max_examples=120, deadline=None)
@given(mapped_problems())
def test_tile_transfers_equal_the_changes_of_the_tile_origin(problem):
    """Tiles a level receives = 1 + the steps of the loops above it at which the operand's tile
    origin (per dim it uses) moves."""
    op, arch, m = problem
    nest = NestRows.of_mapping(op, arch, m)
    strides = loop_strides(m)
    for c in range(1, len(arch.levels)):
        above = _above(m, c)
        if math.prod(m.loops[i].bound for i in above) > MAX_STEPS:
            continue
        for X in op.operands:
            prev, changes = None, 0
            for idx in _walk(m, above):
                origin = tuple(sum(v * strides[i] for v, i in zip(idx, above, strict=True) if m.loops[i].dim == d)
                               for d in sorted(X.dims))
                changes += prev is not None and origin != prev
                prev = origin
            assert tile_transfer_rows(nest, X.dims, c)[0] == 1 + changes


@settings(max_examples=120, deadline=None)
@given(mapped_problems(imperfect=False))
def test_class_deltas_add_up_to_the_brute_force_fills(problem):
    """Perfect nests: the whole tile plus transitions x the elements entering at each (per class),
    times the instances in use, is what the brute-force executor counts as fills of an input."""
    op, arch, m = problem
    nest = NestRows.of_mapping(op, arch, m)
    ref = reference_counts(op, arch, m)
    for X in op.inputs:
        chain = [i for i in range(len(arch.levels)) if X.name in m.keep[i]]
        for c in chain[1:]:
            assert nest.used(c)[0] * nest.deltas(X, c)[2][0] == ref[(c, X.name)].fills


@settings(max_examples=120, deadline=None)
@given(mapped_problems())
def test_pipeline_result_sets_are_the_changes_of_the_output_index(problem):
    """Result sets of the compute pipeline = 1 + the temporal steps at which the output index moves
    (the innermost loops over dims the output does not use accumulate one result)."""
    op, _, m = problem
    temporal = [i for i, l in enumerate(m.loops) if not l.spatial]
    if math.prod(m.loops[i].bound for i in temporal) > MAX_STEPS:
        return
    strides = loop_strides(m)
    prev, changes = None, 0
    for idx in _walk(m, temporal):
        out = tuple(sum(v * strides[i] for v, i in zip(idx, temporal, strict=True) if m.loops[i].dim == d)
                    for d in sorted(op.output.dims))
        changes += prev is not None and out != prev
        prev = out
    results, rows = pipeline_counts(op, m.loops, ())
    assert results == 1 + changes
    assert rows == math.prod(m.loops[i].bound for i in temporal)   # nothing streamed: one row per step


@settings(max_examples=60, deadline=None)
@given(mapped_problems(imperfect=True))
def test_edge_extents_are_the_last_positions_tile(problem):
    """An edge dim's tile at its loop's last position: the operator's size less the loop's
    (bound - 1) strides, clipped to the full tile."""
    op, arch, m = problem
    nest = NestRows.of_mapping(op, arch, m)
    for c in range(1, len(arch.levels)):
        for d, k, b, e in nest.edges(c):
            if k[0] < 0:
                continue
            g = nest.above(c)[k[0]]
            stride = int(nest.stride[0, g])
            last = set(range((int(b[0]) - 1) * stride, (int(b[0]) - 1) * stride + int(nest.inner[c][d][0])))
            assert e[0] == len(last & set(range(op.sizes[d])))


def test_rows_are_independent():
    """The same rows evaluated together and one by one give the same latencies (no row leaks into
    another through the shared port schedules)."""
    from accelmap.arch import get_accelerator
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.cost.batch import evaluate_batch
    from accelmap.workload import conv2d

    arch = get_accelerator("ascend_like")
    op = adopt_precision(conv2d("c", c=16, h=8, w=8, k=16, r=3, s=3, padding=1), arch)
    structure = [(d, lv, None) for lv in range(len(arch.levels)) for d in ("K", "C", "P", "Q")]
    keep = tuple(frozenset(lv.holds) for lv in arch.levels)
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(40):
        row = [1] * len(structure)
        for d, size in (("K", 16), ("C", 16), ("P", 8), ("Q", 8)):
            slots = [j for j, s in enumerate(structure) if s[0] == d]
            for _ in range(int(math.log2(size))):
                row[rng.choice(slots)] *= 2
        rows.append(row)
    together = evaluate_batch(op, arch, structure, keep, np.array(rows))["latency"]
    alone = [evaluate_batch(op, arch, structure, keep, np.array([r]))["latency"][0] for r in rows]
    assert np.array_equal(together, np.array(alone))


def _stationary_weights_arch():
    from accelmap.arch import accelerator_from_dict
    return accelerator_from_dict({
        "name": "db_reg", "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 32}},
        "levels": [
            {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "64 bit",
             "read_energy": "100 pJ"},
            {"name": "RF", "holds": ["W"], "capacity": "128 B", "width": "8 bit", "read_energy": "1 pJ",
             "write_bandwidth": "1 bit/cycle",
             "double_buffered": True, "bypass": False}]})


def test_a_double_buffered_load_hides_behind_the_streams_whole_previous_tile():
    """The weights of a 3x3x4 filter stay in a double-buffered register for 14 x 14 output pixels;
    their next filter loads during all of them, not during one pixel's compute (the simulator's
    in-order load queue runs ahead that far when no other stream loads into the level)."""
    from accelmap.cost.model import evaluate
    from accelmap.mapping import Loop, Mapping
    from accelmap.sim import simulate
    from accelmap.workload import conv2d

    arch = _stationary_weights_arch()
    op = conv2d("c", c=4, h=16, w=16, k=8, r=3, s=3, bits={"I": 8, "W": 8, "O": 32})
    m = Mapping((Loop("K", 8, 0), Loop("P", 14, 0), Loop("Q", 14, 0), Loop("C", 4, 1), Loop("R", 3, 1),
                 Loop("S", 3, 1)), (frozenset("IWO"), frozenset("W")))
    res = evaluate(op, arch, m)
    sim = simulate(op, arch, m, functional=False)
    assert math.isclose(res.latency, sim.cycles, rel_tol=1e-9)
    # 36 weights load in 288 cycles, inside one filter's 196 x 36 MAC cycles (one pixel's compute
    # is 36 cycles): only the first load shows
    assert res.latency == res.compute_cycles + 36 * 8


def _register_arch(**reg):
    from accelmap.arch import accelerator_from_dict
    return accelerator_from_dict({
        "name": "reg", "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 32}},
        "levels": [
            {"name": "SRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit",
             "read_energy": "2 pJ"},
            {"name": "Reg", "holds": ["I"], "capacity": "1 B", "width": "8 bit", "read_energy": "0.1 pJ",
             "write_bandwidth": "8 bit/cycle", "bypass": False, **reg}]})


def test_a_register_written_at_the_clock_edge_refills_without_stalling():
    """A one-byte input register rewritten every cycle: written at the clock edge, the refill
    overlaps the MAC that reads the old value; single-buffered, every MAC waits for it. The model
    and the simulator agree on both, and the register needs no second byte."""
    from accelmap.cost.model import evaluate
    from accelmap.mapping import Loop, Mapping
    from accelmap.sim import simulate
    from accelmap.workload import gemm

    op = gemm("g", m=8, n=4, k=16, bits={"I": 8, "W": 8, "O": 32})
    m = Mapping((Loop("M", 8, 0), Loop("K", 16, 0), Loop("N", 4, 1)), (frozenset("ABO"), frozenset("A")))
    lat = {}
    for name, reg in (("edge", {"written_at_clock_edge": True}), ("single", {})):
        arch = _register_arch(**reg)
        res = evaluate(op, arch, m)
        assert math.isclose(res.latency, simulate(op, arch, m, functional=False).cycles, rel_tol=1e-9)
        lat[name] = res.latency
        steps, macs = 8 * 16, 8 * 16 * 4
        assert res.compute_cycles == macs
    # 128 one-cycle loads: hidden behind the 4 MACs of each step but the first when written at the
    # edge; single-buffered, each one stalls the array
    assert lat["edge"] == macs + 1
    assert lat["single"] == macs + steps


def test_double_buffered_and_written_at_the_clock_edge_exclude_each_other():
    import pytest
    from accelmap.errors import SpecError
    with pytest.raises(SpecError, match="exclude each other"):
        _register_arch(written_at_clock_edge=True, double_buffered=True)


def test_double_buffered_when_two_tiles_fit_is_decided_per_mapping():
    """``double_buffered: when_fits``: the weight register double-buffers a 36-byte filter when it has
    72 bytes, and is single-buffered (each new filter stalls the array) when it has 64; the model
    and the simulator agree on both, and a tile needs only the whole capacity."""
    from dataclasses import replace

    from accelmap.cost.latency import double_buffers
    from accelmap.cost.model import evaluate
    from accelmap.mapping import Loop, Mapping
    from accelmap.sim import simulate
    from accelmap.workload import conv2d

    base = _stationary_weights_arch()
    op = conv2d("c", c=4, h=16, w=16, k=8, r=3, s=3, bits={"I": 8, "W": 8, "O": 32})
    m = Mapping((Loop("K", 8, 0), Loop("P", 14, 0), Loop("Q", 14, 0), Loop("C", 4, 1), Loop("R", 3, 1),
                 Loop("S", 3, 1)), (frozenset("IWO"), frozenset("W")))
    lat = {}
    for cap in (72, 64):
        rf = replace(base.levels[1], double_buffered=False, double_buffered_when_fits=True, capacity_bits=cap * 8)
        arch = replace(base, levels=(base.levels[0], rf))
        assert double_buffers(op, arch, m) == (False, cap == 72)
        res = evaluate(op, arch, m)
        assert math.isclose(res.latency, simulate(op, arch, m, functional=False).cycles, rel_tol=1e-9)
        lat[cap] = res.latency
    load = 36 * 8                       # one filter at 1 bit/cycle
    assert lat[72] == res.compute_cycles + load
    assert lat[64] == res.compute_cycles + 8 * load


def test_finished_outputs_move_at_the_output_stage_precision():
    """With ``final_output_bits: 8`` and 32-bit partial sums, each output element's last drain from
    the register and its last update of the SRAM cost 8 bits; the partial sums that go back and
    forth keep 32. Model energy to the pJ, and model latency equal to the simulator's."""
    from accelmap.arch import accelerator_from_dict
    from accelmap.cost.model import evaluate
    from accelmap.mapping import Loop, Mapping
    from accelmap.sim import simulate
    from accelmap.workload import gemm

    def arch(final):
        compute = {"mac_energy": "0 pJ", "precision": {"I": 8, "W": 8, "O": 32}}
        if final:
            compute["final_output_bits"] = final
        return accelerator_from_dict({"name": "acc", "compute": compute, "levels": [
            {"name": "SRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit",
             "read_energy": "1 pJ", "write_energy": "2 pJ", "write_bandwidth": "4 bit/cycle"},
            {"name": "Acc", "holds": ["O"], "capacity": "4 B", "width": "32 bit", "read_energy": "0 pJ",
             "bypass": False}]})

    op = gemm("g", m=4, n=4, k=6, bits={"I": 8, "W": 8, "O": 32})
    # K split around the accumulator: the partial sums of each output go up and come back once
    m = Mapping((Loop("K", 2, 0), Loop("M", 4, 0), Loop("N", 4, 0), Loop("K", 3, 1)),
                (frozenset("ABO"), frozenset("O")))
    wide, narrow = evaluate(op, arch(None), m), evaluate(op, arch(8), m)
    n_out = 16
    counts = dict(zip(("fills", "reads", "updates", "drains"), wide.counts[("SRAM", "O")], strict=True))
    assert counts["updates"] == 2 * n_out                 # one partial, one finished per element
    # SRAM: n_out finished updates at 8 of 32 bits, write energy 2 pJ per 8-bit word
    assert math.isclose(wide.energy[("SRAM", "O")] - narrow.energy[("SRAM", "O")], n_out * 2 * (32 - 8) / 8)
    assert narrow.latency < wide.latency                  # the 4 bit/cycle write port moves fewer bits
    for a in (arch(None), arch(8)):
        res = evaluate(op, a, m)
        assert math.isclose(res.latency, simulate(op, a, m, functional=False).cycles, rel_tol=1e-9)
