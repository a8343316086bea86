"""Rule B6's bounds of every bypass choice under one unrolling (``spatial.keep_lower_bounds``, what the exact search
ranks and cuts the choices by) are ``spatial_lower_bound``'s, choice by choice, to the bit: on the unrollings of random
mappings of every preset, padded ones included."""

import random

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import keep_lower_bounds, spatial_lower_bound
from strategies import random_operator

ALL_PRESETS = ["eyeriss_like", "simba_like", "tpu_like", "edge_tpu_like", "ascend_like", "vta_like", "vta_8x8x8",
               "diana_like", "aie_like"]


@pytest.mark.parametrize("arch_name", ALL_PRESETS)
def test_keep_bounds_equal_the_bound_of_each_choice(arch_name):
    rng = random.Random(6)
    arch = get_accelerator(arch_name)
    checked = 0
    for draw in range(6):
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30, imperfect=draw % 2 == 1)
        except MappingError:
            continue
        spatial = tuple(l for l in m.loops if l.spatial)
        keeps = keep_options(op, arch, Constraints())
        want = [spatial_lower_bound(op, arch, spatial,
                                    {X.name: [[i for i, kp in enumerate(keep) if X.name in kp]] for X in op.operands})
                for keep in keeps]
        assert keep_lower_bounds(op, arch, spatial, keeps) == want, (op, m)
        checked += 1
    assert checked >= 3
