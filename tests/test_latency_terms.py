"""One test per geometric term of the latency model (cost/nest_rows.py, cost/latency.py), each
against a brute-force count over the loop nest. The terms are defined once over NumPy rows; the
model of one mapping runs them on one row, the batch evaluator on many."""

import itertools
import math

import numpy as np
from hypothesis import given, settings

from accelmap.cost.latency import pipeline_counts, tile_transfer_rows
from accelmap.cost.nest_rows import NestRows
from accelmap.cost.reference import reference_counts
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
