"""``NestRows.of_mapping`` keeps its last nest: a mapping with the same loops (another bypass choice of one tiling)
shares the geometry and must cost exactly what a fresh nest costs."""

import random
from dataclasses import replace

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost import nest_rows
from accelmap.cost.model import evaluate
from accelmap.cost.nest_rows import NestRows
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Mapping
from accelmap.mapping.sampling import random_mapping
from accelmap.mapping.validate import validate
from accelmap.search.space import Constraints, keep_options
from accelmap.workload import conv2d


def _fresh(op, arch, m):
    nest_rows._LAST_MAPPING_NEST.clear()
    return evaluate(op, arch, m).to_dict()


def _mappings_with_two_keeps(preset):
    """Two mappings of the same loops whose bypass choices differ at a level where both keep some operand, and
    whose latencies differ: a term cached for one bypass choice would be wrong for the other."""
    arch = get_accelerator(preset)
    op = adopt_precision(conv2d("c", c=8, h=10, w=10, k=12, r=3, s=3, padding=1), arch)
    rng = random.Random(preset)
    keeps = keep_options(op, arch, Constraints())
    for _ in range(400):
        try:
            m = random_mapping(op, arch, rng)
        except MappingError:
            continue
        valid = []
        for kp in keeps:
            other = Mapping(m.loops, kp)
            try:
                validate(op, arch, other)
            except MappingError:
                continue
            valid.append(other)
        for a in valid:
            for b in valid:
                if any(x != y and x & y for x, y in zip(a.keep, b.keep, strict=True)) and \
                        _fresh(op, arch, a)["latency_cycles"] != _fresh(op, arch, b)["latency_cycles"]:
                    return op, arch, [a, b]
    raise AssertionError(f"no mapping of {preset} with two valid bypass choices")


def test_same_loops_with_another_keep_cost_as_a_fresh_nest():
    for preset in ("eyeriss_like", "ascend_like", "vta_like"):
        op, arch, ms = _mappings_with_two_keeps(preset)
        want = [_fresh(op, arch, m) for m in ms]
        nest_rows._LAST_MAPPING_NEST.clear()
        # alternate bypass choices of the same loops: every call after the first shares the first's geometry
        for _ in range(2):
            for m, w in zip(ms, want, strict=True):
                assert evaluate(op, arch, m).to_dict() == w, preset


def test_geometry_is_shared_only_by_the_same_operator_accelerator_and_loops():
    op, arch, ms = _mappings_with_two_keeps("eyeriss_like")
    nest_rows._LAST_MAPPING_NEST.clear()
    a = NestRows.of_mapping(op, arch, ms[0])
    b = NestRows.of_mapping(op, arch, ms[1])
    assert b.inner is a.inner and b._deltas is a._deltas          # same loops: shared
    assert b._fits is not a._fits and b._loads is not a._loads and b._memo is not a._memo
    other_op = replace(op, name="other")
    assert NestRows.of_mapping(other_op, arch, ms[0]).inner is not a.inner
    other_arch = replace(arch, name="other")
    assert NestRows.of_mapping(op, other_arch, ms[0]).inner is not a.inner
