"""The vectorized energy evaluator agrees with the scalar model on every row."""

import math
import random

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.batch import evaluate_batch, structure_mapping
from accelmap.cost.model import evaluate
from accelmap.cost.nest_rows import NestRows
from accelmap.errors import MappingError
from accelmap.mapping.sampling import prime_factors, random_mapping, slots
from accelmap.workload.models import load_model
from strategies import accelerators, random_operator


@settings(max_examples=120)
@given(accelerators(), st.integers(0, 2 ** 31))
def test_batch_equals_scalar(arch, seed):
    rng = random.Random(seed)
    op = random_operator(rng)
    rows, structure, keep = [], None, None
    # Several tilings of one structure: draw a mapping, then pad it with bound-1 loops
    # so that other draws with the same loop slots fit the same structure.
    m = random_mapping(op, arch, rng)
    structure = [(l.dim, l.level, l.axis) for l in m.loops]
    extra = [(d, lv, None) for d in op.dim_names for lv in range(len(arch.levels)) if rng.random() < 0.3]
    full = sorted(structure + extra, key=lambda s: (s[1], s[2] is not None))
    keep = m.keep
    row = []
    used = list(m.loops)
    for s in full:
        hit = next((l for l in used if (l.dim, l.level, l.axis) == s), None)
        if hit is not None:
            used.remove(hit)
            row.append(hit.bound)
        else:
            row.append(1)
    # The batch evaluator is for perfect tilings: hypothesis draws again for a nest that is not one.
    assume(all(m.dim_product(d) == s for d, s in op.dims))
    got = evaluate_batch(op, arch, full, keep, np.array([row]))
    ref = evaluate(op, arch, m)
    assert math.isclose(got["energy"][0], ref.energy_total, rel_tol=1e-9)
    assert got["compute_cycles"][0] == ref.compute_cycles
    assert math.isclose(got["latency"][0], ref.latency, rel_tol=1e-9)


@settings(max_examples=40, deadline=None)
@given(accelerators(), st.integers(0, 2 ** 31))
def test_imperfect_rows_equal_scalar(arch, seed):
    """Rows with partial tiles (padded spatial unrollings, imperfect temporal factors) beside a perfect row
    of the same structure, bound-1 slots in between: every row equals the scalar model."""
    from accelmap.mapping.validate import validate

    rng = random.Random(seed)
    op = random_operator(rng)
    m = random_mapping(op, arch, rng, imperfect=True)
    assume(any(m.dim_product(d) != s for d, s in op.dims))
    other = random_mapping(op, arch, rng)
    # One structure holding both mappings' loops (each level's temporal loops of the one, then the other's),
    # and a few bound-1 slots.
    extra = [(d, lv, None) for d in op.dim_names for lv in range(len(arch.levels)) if rng.random() < 0.3]
    tagged = ([(l.level, l.spatial, 0, (l.dim, l.level, l.axis), l.bound) for l in m.loops]
              + [(l.level, l.spatial, 1, (l.dim, l.level, l.axis), l.bound) for l in other.loops]
              + [(s[1], False, 2, s, 1) for s in extra])
    tagged.sort(key=lambda t: (t[0], t[1], t[2]))
    structure = [t[3] for t in tagged]
    rows = [[t[4] if t[2] == k else 1 for t in tagged] for k in (0, 1)]
    try:
        validate(op, arch, structure_mapping(structure, m.keep, rows[1]))
    except MappingError:
        rows = rows[:1]
    got = evaluate_batch(op, arch, structure, m.keep, np.array(rows))
    for r, row in enumerate(rows):
        ref = evaluate(op, arch, structure_mapping(structure, m.keep, row), check=r == 1)
        assert math.isclose(got["energy"][r], ref.energy_total, rel_tol=1e-9), (r, row)
        assert got["compute_cycles"][r] == ref.compute_cycles
        assert math.isclose(got["latency"][r], ref.latency, rel_tol=1e-9), (r, row)


def test_batch_on_a_resnet_layer_matches_scalar_for_many_tilings():
    arch = get_accelerator("eyeriss_like")
    from accelmap.workload import conv2d
    op = adopt_precision(conv2d("c", c=64, h=56, w=56, k=64, r=3, s=3, padding=1), arch)
    rng = random.Random(3)
    checked = 0
    while checked < 40:
        try:
            m = random_mapping(op, arch, rng)
        except MappingError:
            continue
        structure = [(l.dim, l.level, l.axis) for l in m.loops]
        got = evaluate_batch(op, arch, structure, m.keep, np.array([[l.bound for l in m.loops]]))
        ref = evaluate(op, arch, m, check=False)
        assert math.isclose(got["energy"][0], ref.energy_total, rel_tol=1e-9)
        assert got["compute_cycles"][0] == ref.compute_cycles
        assert math.isclose(got["latency"][0], ref.latency, rel_tol=1e-9)
        checked += 1


@pytest.mark.parametrize("preset", ["eyeriss_like", "tpu_like", "vta_like", "simba_like", "edge_tpu_like",
                                    "ascend_like", "diana_like", "aie_like", "vta_8x8x8"])
def test_batch_rows_of_one_structure_equal_scalar_on_every_preset(preset):
    """Many rows of one all-dims-at-every-level structure, every row checked against the scalar model:
    exercises double buffering, DMA setup and pipeline terms where the preset has them."""
    from accelmap.mapping.validate import validate
    from accelmap.workload import conv2d

    arch = get_accelerator(preset)
    op = adopt_precision(conv2d("c", c=8, h=10, w=10, k=12, r=3, s=3, padding=1, stride=1), arch)
    rng = random.Random(preset)
    nlev = len(arch.levels)
    axes = [(i, a.name) for i, lv in enumerate(arch.levels) if lv.fanout for a in lv.fanout.axes]
    structure = []
    for lv in range(nlev):
        order = list(op.dim_names)
        rng.shuffle(order)
        structure += [(d, lv, None) for d in order]
        structure += [(d, lv, ax) for (i, ax) in axes if i == lv for d in op.dim_names[:3]]
    rows, refs = [], []
    tries = 0
    while len(rows) < 25 and tries < 4000:
        tries += 1
        keep = rng.choice([k for k in _keeps(op, arch)])
        row = [1] * len(structure)
        for d, size in op.dims:
            for p in prime_factors(size):
                slots = [j for j, s in enumerate(structure) if s[0] == d]
                row[rng.choice(slots)] *= p
        m = structure_mapping(structure, keep, row)
        try:
            validate(op, arch, m)
        except MappingError:
            continue
        rows.append((keep, row))
        refs.append(evaluate(op, arch, m))
    assert len(rows) >= 10, f"only {len(rows)} valid draws on {preset}"
    for keep in {k for k, _ in rows}:
        sel = [i for i, (k, _) in enumerate(rows) if k == keep]
        got = evaluate_batch(op, arch, structure, keep, np.array([rows[i][1] for i in sel]))
        for r, i in enumerate(sel):
            assert math.isclose(got["energy"][r], refs[i].energy_total, rel_tol=1e-9)
            assert got["compute_cycles"][r] == refs[i].compute_cycles
            assert math.isclose(got["latency"][r], refs[i].latency, rel_tol=1e-9), (preset, rows[i])


def _keeps(op, arch):
    from accelmap.search.space import Constraints, keep_options
    return keep_options(op, arch, Constraints())


def test_large_batch_in_pieces_equals_one_piece(monkeypatch):
    """A batch cut into pieces (evaluate_batch does it past CLASS_ELEMENTS) gives the same rows."""
    import accelmap.cost.batch as batch
    from accelmap.workload import conv2d
    arch = get_accelerator("simba_like")
    op = adopt_precision(conv2d("c", c=8, h=10, w=10, k=12, r=3, s=3, padding=1, stride=1), arch)
    rng = random.Random(7)
    structure = [(d, lv, None) for lv in range(len(arch.levels)) for d in op.dim_names]
    keep = tuple(frozenset(lv.holds) for lv in arch.levels)
    rows = []
    for _ in range(300):
        row = [1] * len(structure)
        for d, size in op.dims:
            for p in prime_factors(size):
                row[rng.choice([j for j, s in enumerate(structure) if s[0] == d])] *= p
        rows.append(row)
    whole = evaluate_batch(op, arch, structure, keep, np.array(rows))
    monkeypatch.setattr(batch, "CLASS_ELEMENTS", 1)       # pieces of 256 rows
    cut = evaluate_batch(op, arch, structure, keep, np.array(rows))
    for k in whole:
        assert np.array_equal(whole[k], cut[k]), k


def test_rows_with_a_holed_window_are_counted_exactly_in_the_batch(monkeypatch):
    """A window whose stride exceeds it (I[3*p + r], r < 3) touches a set with holes, which the closed
    forms do not cover: those rows are counted element by element (``nest_rows.axis_size``), the others
    by the closed forms, all in the batch (no row goes to the scalar counter); all equal the scalar model."""
    import itertools

    import accelmap.cost.batch as batch
    from accelmap.arch.schema import accelerator_from_dict
    from accelmap.mapping.validate import validate
    from accelmap.workload import parse_expression
    from test_model_mapper import TINY

    arch = accelerator_from_dict(TINY, "tiny")
    op = parse_expression("O[p] += I[3*p+r] * W[r]", {"p": 6, "r": 2})
    structure = [(d, lv, None) for lv in range(3) for d in ("p", "r")]
    keep = (frozenset("OIW"), frozenset("OIW"), frozenset("OW"))
    rows = []
    for p_lv in itertools.product(range(3), repeat=2):          # where p's primes 2 and 3 go
        for r_lv in range(3):
            row = [1] * len(structure)
            row[2 * p_lv[0]] *= 2
            row[2 * p_lv[1]] *= 3
            row[2 * r_lv + 1] = 2
            try:
                validate(op, arch, structure_mapping(structure, keep, row))
            except MappingError:
                continue
            rows.append(row)
    fell_back = []
    scalar = batch.access_counts

    def counting(op_, arch_, m):
        fell_back.append(m)
        return scalar(op_, arch_, m)

    monkeypatch.setattr(batch, "access_counts", counting)
    got = evaluate_batch(op, arch, structure, keep, np.array(rows))
    # I's tile at Buf (its only level below DRAM) has holes exactly when it spans more than one p and both r.
    def holed(row):
        return math.prod(row[2 * lv] for lv in (1, 2)) > 1 and math.prod(row[2 * lv + 1] for lv in (1, 2)) == 2

    assert NestRows(op, arch, structure, np.array(rows)).sizes(op.operand("I"), 1)[2].tolist() == \
        [holed(r) for r in rows]
    assert 0 < sum(map(holed, rows)) < len(rows)
    assert not fell_back
    for r, row in enumerate(rows):
        ref = evaluate(op, arch, structure_mapping(structure, keep, row))
        assert math.isclose(got["energy"][r], ref.energy_total, rel_tol=1e-9)
        assert math.isclose(got["latency"][r], ref.latency, rel_tol=1e-9)


def test_a_row_without_outer_loops_beside_rows_with_them():
    # A batch keeps loop slots of bound 1 for the rows that use them. On tpu_like's UB (double-
    # buffered where two tiles fit), a row with no loop above UB gets one tile per stream: the
    # memory port's tail must not give it a period from its bound-1 DRAM slots (the batch said
    # 581,279 cycles where the scalar model and the simulator say 581,248).
    arch = get_accelerator("tpu_like")
    layer = next(l for l in load_model("resnet18").layers if l.name == "layer4.0.conv2")
    op = adopt_precision(layer.operator, arch)
    structure = sorted([(d, lv, ax) for lv, ax, _ in slots(arch) for d in op.dim_names],
                       key=lambda s: (s[1], s[2] is not None))
    alone = [1, 1, 1, 1, 1, 1, 1, 1, 32, 128, 7, 1, 1, 1, 1, 4, 4, 1, 1, 1, 1, 1, 2, 1, 1, 1, 3, 3, 1, 2, 1, 1, 7, 1, 1]
    outer = list(alone)
    outer[1], outer[8] = 2, 16          # K: 2 at DRAM, 16 at UB
    keep = (frozenset({"O", "I", "W"}), frozenset({"O", "I"}), frozenset({"W"}))
    got = evaluate_batch(op, arch, structure, keep, np.array([alone, outer]))
    for r, row in enumerate((alone, outer)):
        ref = evaluate(op, arch, structure_mapping(structure, keep, np.array(row)), check=False)
        assert got["latency"][r] == pytest.approx(ref.latency, rel=1e-12)
    assert got["latency"][0] == 581248
