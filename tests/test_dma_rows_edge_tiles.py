"""Rows of edge tiles: where a tile does not divide its dim, the last tile along it is smaller, and a 2-D
DMA reads it in fewer rows. ``mean_tile_rows`` (what a count of loads pays per load) against a walk of the
nest that counts the contiguous address runs of every tile it loads."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from accelmap.arch.schema import accelerator_from_dict
from accelmap.cost.dma_rows import load_setup_cycles, mean_tile_rows, tile_rows
from accelmap.cost.nest_rows import NestRows
from accelmap.mapping.loopnest import Loop, Mapping, loop_strides
from accelmap.search.imperfect_tiles import imperfect_factorizations
from accelmap.workload import parse_expression


def _chain(levels: int, row_cycles: int = 0):
    lv = [{"name": f"L{levels - i}", "holds": ["I", "W", "O"], "capacity": "unbounded"} for i in range(levels)]
    lv[0]["read_row_cycles"] = row_cycles
    return accelerator_from_dict({"name": "chain", "levels": lv,
                                  "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 32}}})


def _walked_rows(op, m: Mapping, X, c: int) -> float:
    """Mean contiguous runs per load of X into level c: walk the loops above c; each time X's tile (its
    start and extents, clipped to the operator) changes, count the runs of its addresses in the stored
    tensor (X's axes in declared order, row-major). A step whose tile lies past the end of a dim is
    empty; the tile after it loads again, as in the simulator's program."""
    strides = loop_strides(m)
    above = [i for i, lp in enumerate(m.loops) if lp.level < c]
    ext = {d: math.prod(lp.bound for lp in m.loops if lp.dim == d and lp.level >= c) for d in op.dim_names}
    full = [1 + sum(k * (op.sizes[d] - 1) for d, k in ix.terms) for ix in X.indices]
    addr = np.arange(math.prod(full)).reshape(full)
    runs, loads, last = 0, 0, None
    seen: dict[tuple, int] = {}
    for idx in itertools.product(*(range(m.loops[i].bound) for i in above)):
        start = dict.fromkeys(op.dim_names, 0)
        for i, v in zip(above, idx, strict=True):
            start[m.loops[i].dim] += v * strides[i]
        size = {d: min(ext[d], op.sizes[d] - start[d]) for d in op.dim_names}
        if any(size[d] <= 0 for d in op.dim_names):
            last = None          # a step past the operator's end does nothing; the next tile loads anew
            continue
        tile = tuple((start[d], size[d]) for d in sorted(X.dims))
        if tile == last:
            continue             # the same tile stays: no load
        last = tile
        if tile not in seen:
            box = tuple(slice(sum(k * start[d] for d, k in ix.terms),
                              min(f, sum(k * start[d] for d, k in ix.terms) + 1
                                  + sum(k * (size[d] - 1) for d, k in ix.terms)))
                        for ix, f in zip(X.indices, full, strict=True))
            picked = np.sort(addr[box].ravel())
            seen[tile] = 1 + int(np.count_nonzero(np.diff(picked) != 1))
        runs += seen[tile]
        loads += 1
    return runs / loads


def _random_mappings(op, levels: int, count: int, rng: random.Random):
    """Mappings of imperfect factors over ``levels`` temporal levels, loop orders shuffled per level."""
    out = []
    while len(out) < count:
        per_dim = {d: rng.choice(imperfect_factorizations(s, levels)) for d, s in op.sizes.items()}
        loops = []
        for lv in range(levels):
            here = [Loop(d, b[lv], lv) for d, b in per_dim.items() if b[lv] > 1]
            rng.shuffle(here)
            loops += here
        m = Mapping(tuple(loops), tuple(frozenset({"I", "W", "O"}) for _ in range(levels)))
        if any(math.prod(b) != op.sizes[d] for d, b in per_dim.items()):      # at least one edge tile
            out.append(m)
    return out


@pytest.mark.parametrize("expr", ["O[k,p] += I[c,p+r] * W[k,c,r]",      # channels outermost
                                  "O[k,p] += I[p+r,c] * W[r,c,k]"])     # channels innermost
def test_mean_rows_equal_a_walk_of_every_load_edge_tiles_included(expr):
    op = parse_expression(expr, {"k": 5, "p": 7, "c": 6, "r": 3})
    arch = _chain(3)
    checked = edges = 0
    for m in _random_mappings(op, 3, 15, random.Random(5)):
        nest = NestRows.of_mapping(op, arch, m)
        for X in op.operands:
            for c in (1, 2):
                got = float(mean_tile_rows(nest, X, c)[0])
                assert got == pytest.approx(_walked_rows(op, m, X, c), rel=1e-12), (m, X.name, c)
                edges += got != float(tile_rows(nest, X, c)[0])
                checked += 1
    assert checked == 90 and edges > 30          # the edge tiles changed the rows in many cases


def test_a_known_edge_tile_by_hand_and_what_a_load_pays():
    # I[c, p+r] with c = 6 in tiles of 4: tiles of 4 and 2 channels; p = 7 whole, r = 3 whole: a tile
    # spans whole rows of 9 inputs, so each channel is one run: 4 rows, then 2
    op = parse_expression("O[k,p] += I[c,p+r] * W[k,c,r]", {"k": 5, "p": 7, "c": 6, "r": 3})
    m = Mapping((Loop("c", 2, 0), Loop("k", 5, 1), Loop("c", 4, 1), Loop("p", 7, 1), Loop("r", 3, 1)),
                (frozenset("IWO"), frozenset("IWO")))
    arch = _chain(2, row_cycles=16)
    nest = NestRows.of_mapping(op, arch, m)
    X = op.operand("I")
    assert int(tile_rows(nest, X, 1)[0]) == 1                  # the first tile: 4 whole channels, one run
    # W[k,c,r]: tiles of 5 x 4 x 3 and 5 x 2 x 3; c is cut, so a row per k: 5 rows both
    assert float(mean_tile_rows(nest, op.operand("W"), 1)[0]) == 5.0
    m2 = Mapping((Loop("p", 2, 0), Loop("k", 5, 1), Loop("c", 6, 1), Loop("p", 4, 1), Loop("r", 3, 1)),
                 (frozenset("IWO"), frozenset("IWO")))
    nest2 = NestRows.of_mapping(op, arch, m2)
    # p = 7 in tiles of 4: input boxes of 6 and 5 columns, cut: a row per channel, 6 both
    assert float(mean_tile_rows(nest2, X, 1)[0]) == 6.0
    # O[k,p]: tiles of 5 x 4 and 5 x 3, p cut: 5 rows each; with c = 6 in tiles of 4 on W above, 5 and 5
    assert float(mean_tile_rows(nest2, op.operand("O"), 1)[0]) == 5.0
    # a load of a known tile pays its own rows; a count of loads the mean
    assert float(load_setup_cycles(nest2, X, 1, 0, {})[0]) == 16 * 6
    assert float(load_setup_cycles(nest2, X, 1, 0)[0]) == 16 * 6
