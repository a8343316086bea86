"""Rule S1 per bypass choice from parts computed once for every choice (``spatial.UnrollingTerms``): the same bound,
to the bit, as S1 with that choice's level sets alone, and the exact search's decisions unchanged."""

import random

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import UnrollingTerms, spatial_lower_bound
from strategies import random_operator

PRESETS = ["eyeriss_like", "simba_like", "tpu_like", "edge_tpu_like", "ascend_like", "vta_like",
           "vta_8x8x8", "diana_like", "aie_like"]


def test_each_bypass_choice_from_shared_parts_equals_its_own_bound_to_the_bit():
    """Random unrollings of every preset, padded ones included, each with every bypass choice its fan-outs allow."""
    rng = random.Random(70)
    checked = 0
    for n in range(36):
        arch = get_accelerator(PRESETS[n % len(PRESETS)])
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30, imperfect=bool(n % 2))
        except MappingError:
            continue
        spatial = tuple(l for l in m.loops if l.spatial)
        keeps = keep_options(op, arch, Constraints())
        sets: dict[str, list[list[int]]] = {X.name: [] for X in op.operands}
        picks = []
        for keep in keeps:
            pick = {}
            for X in op.operands:
                chain = [i for i, kp in enumerate(keep) if X.name in kp]
                if chain not in sets[X.name]:
                    sets[X.name].append(chain)
                pick[X.name] = sets[X.name].index(chain)
            picks.append(pick)
        terms = UnrollingTerms(op, arch, spatial, sets)
        for keep, pick in zip(keeps, picks, strict=True):
            alone = {X.name: [[i for i, kp in enumerate(keep) if X.name in kp]] for X in op.operands}
            assert terms.bound(pick) == spatial_lower_bound(op, arch, spatial, alone), (arch.name, m, keep)
            checked += 1
        assert terms.bound() == spatial_lower_bound(op, arch, spatial, sets)
    assert checked > 100
