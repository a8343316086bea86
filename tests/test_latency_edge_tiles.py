"""The latency model's edge tiles (imperfect factors): its tile transitions against a walk of the nest."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter

from accelmap.arch.accelerator import Accelerator, Compute, Level
from accelmap.cost.latency import _edge_cases
from accelmap.cost.nest_rows import NestRows
from accelmap.mapping.loopnest import Loop, Mapping, loop_strides
from accelmap.mapping.validate import tile_extents
from accelmap.workload import gemm, parse_expression


def _walk(op, m: Mapping, c: int) -> Counter:
    """Every transition of level c's first-instance tile, by walking the temporal loops above c: the
    outermost loop that advances, the clipped extents before and after, and the shift of the start."""
    strides = loop_strides(m)
    above = [i for i, l in enumerate(m.loops) if not l.spatial and l.level < c]
    full = tile_extents(op, m, c)

    def tile(idx):
        start = {d: 0 for d in op.dim_names}
        for i, v in zip(above, idx, strict=True):
            start[m.loops[i].dim] += v * strides[i]
        return start, tuple(min(full[d], op.sizes[d] - start[d]) for d in op.dim_names)

    out: Counter = Counter()
    points = list(itertools.product(*(range(m.loops[i].bound) for i in above)))
    for a, b in itertools.pairwise(points):
        j = next(i for i, x, y in zip(above, a, b, strict=True) if x != y)   # outermost that advances
        (s0, e0), (s1, e1) = tile(a), tile(b)
        out[(j, e0, e1, tuple(s1[d] - s0[d] for d in op.dim_names))] += 1
    return out


# Two levels without fan-out: only the nest's geometry matters here.
TWO_LEVELS = Accelerator("two_levels", (Level("top", ("I", "W", "O"), None), Level("tile", ("I", "W", "O"), None)),
                         Compute(1.0))


def _model(op, m: Mapping, c: int) -> Counter:
    """The latency model's transitions of level c (``_edge_cases`` over the transition classes)."""
    nest = NestRows.of_mapping(op, TWO_LEVELS, m)
    cnt, shifts = nest.classes(c)
    ext = nest.inner[c]
    out: Counter = Counter()
    for w, over in _edge_cases(nest, c):
        for k in range(cnt.shape[0]):
            n = float(cnt[k, 0] * w[k, 0])
            if n <= 0:
                continue
            assert abs(n - round(n)) < 1e-9, "a case's weight is a whole number of transitions"
            eo = tuple(int(over[d][0][k, 0]) if d in over else int(ext[d][0]) for d in op.dim_names)
            en = tuple(int(over[d][1][k, 0]) if d in over else int(ext[d][0]) for d in op.dim_names)
            shift = tuple(int(shifts[d][k, 0]) if d in shifts else 0 for d in op.dim_names)
            out[(eo, en, shift)] += round(n)
    return out


def _by_extents(walked: Counter) -> Counter:
    out: Counter = Counter()
    for (_, e0, e1, shift), n in walked.items():
        out[(e0, e1, shift)] += n
    return out


def test_an_edge_tile_is_reached_once_per_pass_of_its_loop():
    # M = 5 in tiles of 2: the outer loop's third tile is the edge (1 row); N perfect inside it.
    op = gemm("g", m=5, n=4, k=2)
    m = Mapping((Loop("M", 3, 0), Loop("N", 2, 0), Loop("M", 2, 1), Loop("N", 2, 1), Loop("K", 2, 1)),
                (frozenset("OAB"), frozenset("OAB")))
    got = _model(op, m, 1)
    # N advances 3 times (once per M tile; once of those at the edge); M advances twice, once onto the edge.
    assert got == Counter({((2, 2, 2), (2, 2, 2), (0, 2, 0)): 2, ((1, 2, 2), (1, 2, 2), (0, 2, 0)): 1,
                           ((2, 2, 2), (2, 2, 2), (2, -2, 0)): 1, ((2, 2, 2), (1, 2, 2), (2, -2, 0)): 1})
    assert got == _by_extents(_walk(op, m, 1))


def test_edge_situations_equal_a_walk_of_the_nest_on_random_imperfect_tilings():
    rng = random.Random(11)
    checked = 0
    for _ in range(300):
        sizes = {d: rng.randint(1, 9) for d in "pqr"}
        op = parse_expression("O[p,q] += I[p+r,q] * W[r,q]", sizes)
        # Each dim: one loop at the top level (the edge loop when it overshoots) and, below, one or two
        # loops whose product is the tile; so every imperfect dim has its only loop above c outermost.
        loops_top, loops_in = [], []
        for d, n in sizes.items():
            inner = rng.randint(1, n)
            outer = -(-n // inner)
            loops_top.append(Loop(d, outer, 0))
            parts = [inner] if inner < 4 or rng.random() < 0.5 else [2, -(-inner // 2)]
            if math.prod(parts) != inner:
                parts = [inner]
            loops_in += [Loop(d, b, 1) for b in parts]
        rng.shuffle(loops_top)
        rng.shuffle(loops_in)
        m = Mapping(tuple(loops_top + loops_in), (frozenset("OIW"), frozenset("OIW")))
        if any(m.dim_product(d) < n for d, n in sizes.items()):
            continue
        assert _model(op, m, 1) == _by_extents(_walk(op, m, 1)), m
        checked += 1
    assert checked > 200
