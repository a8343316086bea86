"""The vectorized energy evaluator agrees with the scalar model on every row."""

import math
import random

import numpy as np
from hypothesis import given, settings, strategies as st

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.batch import evaluate_batch
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping

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
    # Skip nests that are not perfectly factored: the batch evaluator is for perfect tilings.
    if any(m.dim_product(d) != s for d, s in op.dims):
        return
    got = evaluate_batch(op, arch, full, keep, np.array([row]))
    ref = evaluate(op, arch, m)
    assert math.isclose(got["energy"][0], ref.energy_total, rel_tol=1e-9)
    assert got["compute_cycles"][0] == ref.compute_cycles


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
        checked += 1
