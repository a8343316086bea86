"""The exact search's memos (tile sizes, the deeper nest's counts, the capacity test) return what they stand for."""

import dataclasses
import itertools

from accelmap.cost.access_counts import NestInfo, entering_perfect
from accelmap.mapping.loopnest import Mapping
from accelmap.mapping.validate import tile_fits
from accelmap.search import bounds
from accelmap.search.bounds import BoundContext, _tile_and_entering
from accelmap.search.optimal import SearchStats, level_assignments
from accelmap.search.space import Constraints
from accelmap.workload.index_sets import tile_size
from strategies import random_perfect_mappings

PRESETS = ["eyeriss_like", "tpu_like", "vta_like", "simba_like", "ascend_like"]
# The first assignments of a level (an outer level of a full operator has thousands).
LEAD = 150


def test_tile_of_equals_tile_size_on_random_extents():
    checked = 0
    for rng, arch, op, m in random_perfect_mappings(3, 8, PRESETS):
        ctx = BoundContext(op, arch, m.keep)
        for _ in range(6):
            ext = {d: rng.randint(1, s) for d, s in op.sizes.items()}
            for X in op.operands:
                want = tile_size(X, ext)
                assert ctx.tile_of(X, ext) == want
                assert ctx.tile_of(X, dict(ext)) == want       # the memo's hit
                # dims X does not read are not in the key, and do not change the size
                other = {d: (e if any(d == n for ix in X.indices for n, _ in ix.terms) else e + 1)
                         for d, e in ext.items()}
                assert ctx.tile_of(X, other) == want
                checked += 1
    assert checked > 60


def test_tile_and_entering_memo_equals_a_fresh_count_and_keys_by_the_operator():
    checked = 0
    for _, _, op, m in random_perfect_mappings(4, 8, PRESETS):
        twin = dataclasses.replace(op)       # equal, not the same object: its entries are its own
        assert twin == op and twin is not op
        info = NestInfo(op, Mapping(m.loops, ()))
        for c in range(1, 1 + max((l.level for l in m.loops), default=0)):
            for X in op.operands:
                want = (tile_size(X, info.inner_extents(c)), entering_perfect(info, X, c))
                for o in (op, twin, op):
                    assert _tile_and_entering(o, m.loops, X.name, c) == want
                checked += 1
    assert checked > 20
    assert bounds._ENTERING_OPS.get(id(op)) is op


def test_level_assignments_with_the_capacity_memo_yield_what_they_yield_without():
    checked = 0
    for _, arch, op, m in random_perfect_mappings(6, 8, PRESETS):
        fits: dict = {}
        for level in range(len(arch.levels)):
            rem = dict(op.sizes)
            inner_ext = dict.fromkeys(op.sizes, 1)
            for l in m.loops:
                if l.level > level:
                    rem[l.dim] //= l.bound
                    inner_ext[l.dim] *= l.bound
            plain, memo = SearchStats(), SearchStats()
            want = list(itertools.islice(level_assignments(op, arch, m.keep, level, rem, inner_ext, Constraints(), plain),
                                         LEAD))
            for _ in range(2):      # the second pass answers from the memo
                memo.capacity_cut = 0
                got = list(itertools.islice(level_assignments(op, arch, m.keep, level, rem, inner_ext, Constraints(), memo,
                                                               fits=fits), LEAD))
                assert got == want
                assert memo.capacity_cut == plain.capacity_cut
            checked += len(want) + plain.capacity_cut
        for (keep, level, ext), ok in list(fits.items())[:50]:
            assert ok == tile_fits(op, arch, keep, level, dict(zip(op.sizes, ext, strict=True)))
    assert checked > 100
