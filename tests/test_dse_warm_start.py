"""Warm starts: a neighbouring design's mappings, validated and re-costed, start each design's search."""

import pytest
from tests.test_dse_sweep import SPACE, TINY

from accelmap.arch import accelerator_from_dict
from accelmap.cost.model import evaluate
from accelmap.dse.engines import run_tasks
from accelmap.dse.space import space_from_dict
from accelmap.dse.sweep import point_distance, run_sweep
from accelmap.errors import AccelmapError
from accelmap.search.mapper import map_operator
from accelmap.workload.constructors import gemm
from accelmap.workload.models import Layer, ModelImport


def _arch(x: int = 2):
    import yaml
    d = yaml.safe_load(TINY)
    d["levels"][1]["fanout"]["axes"][0]["size"] = x
    return accelerator_from_dict(d, f"tiny {x}x2")


@pytest.fixture
def space(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    return space_from_dict(SPACE, str(tmp_path / "space.yaml"), tmp_path / "space.yaml")


def test_warm_start_is_validated_recosted_and_never_changes_a_proven_optimum():
    op = gemm("g", m=2, n=4, k=2)
    wide, narrow = _arch(4), _arch(2)
    cold = map_operator(op, wide, strategy="optimal", time_limit=120)
    assert cold.proven_optimal and cold.best.value == 38528.0
    m = cold.best.mapping
    warm = map_operator(op, wide, strategy="optimal", time_limit=120, warm_start=(m,))
    assert warm.stats.extra["warm_start_valid"] == 1
    assert warm.proven_optimal and warm.best.value == cold.best.value
    # The wide design's best unrolls 8 PEs: on the 2x2 array it is invalid, so it is dropped, not used.
    assert m.spatial_product() == 8
    with pytest.raises(AccelmapError):
        evaluate(op, narrow, m)
    on_narrow = map_operator(op, narrow, strategy="heuristic", time_limit=120, warm_start=(m,))
    assert on_narrow.stats.extra["warm_start_valid"] == 0 and on_narrow.best.value > cold.best.value
    # A valid warm start is a candidate of the heuristic's answer too: never worse than the mapping itself.
    h = map_operator(op, wide, strategy="heuristic", time_limit=120, warm_start=(m,))
    assert h.stats.extra["warm_start_valid"] == 1 and h.best.value == cold.best.value


def test_sweep_starts_each_design_from_its_nearest_mapped_neighbours(tmp_path, space):
    model = ModelImport("tiny", "test", (Layer(gemm("g", m=2, n=4, k=2), ("g1",), "Gemm"),))
    pts = list(space.grid())
    # glb 1 KiB/4 KiB x array 2x2/4x2: the last point is one step from the second and third, two from the first.
    assert [point_distance(space, pts[3], p) for p in pts] == [2, 1, 1, 0]
    cold = run_sweep(space, model, points=pts, workers=1, store_path=tmp_path / "s.sqlite", progress=False)
    warm = run_sweep(space, model, points=pts, workers=1, store_path=tmp_path / "s.sqlite", progress=False,
                     warm_start=True)
    # Warm-started rows are their own in the store: nothing was answered from the cold run.
    assert warm.mapped_now == 4
    labels = [o.design.label for o in warm.outcomes]
    assert warm.outcomes[0].run.result["warm_from"] == []
    assert warm.outcomes[1].run.result["warm_from"] == [labels[0]]
    # Two neighbours at most, the nearest first (ties: the one mapped first).
    assert warm.outcomes[3].run.result["warm_from"] == [labels[1], labels[2]]
    assert "warm_start_valid" not in warm.outcomes[0].run.result["layers"][0]
    assert all(o.run.result["layers"][0]["warm_start_valid"] >= 1 for o in warm.outcomes[1:])
    # The heuristic ends its candidate list on this layer, so a warm start can only add candidates.
    for c, w in zip(cold.outcomes, warm.outcomes, strict=True):
        assert w.edp <= c.edp


def _square(x):
    return x * x


def test_prepare_sees_every_result_that_came_back_before_its_task_is_submitted():
    seen: list[int] = []
    prepared_after: list[int] = []

    def prepare(t):
        prepared_after.append(len(seen))
        return t

    run_tasks("local", _square, [1, 2, 3, 4, 5], seen.append, workers=2, prepare=prepare)
    assert sorted(seen) == [1, 4, 9, 16, 25]
    # Two in flight: the third task is prepared only after one result came back, and so on.
    assert prepared_after[:2] == [0, 0]
    assert all(after >= k - 1 for k, after in enumerate(prepared_after) if k >= 2)
    seen.clear(), prepared_after.clear()
    run_tasks("local", _square, [1, 2, 3], seen.append, workers=1, prepare=prepare)
    assert prepared_after == [0, 1, 2] and seen == [1, 4, 9]


def test_co_search_hands_each_configuration_its_neighbours_mappings():
    import itertools

    from tests.test_dse_memory_search import LEVELS, _base, cheapest

    from accelmap.arch.accelerator import adopt_precision
    from accelmap.dse.memory_search import co_search, config_arch, grid_search
    from accelmap.search.baselines import search_random
    from accelmap.workload.constructors import conv2d

    base = _base()
    op = adopt_precision(conv2d("c", c=2, h=4, w=4, k=4, r=3, s=3, padding=1), base)
    found, _ = search_random(op, config_arch(base, LEVELS, (32, 32, 32)), "edp", k=20, seed=1, max_samples=80)
    cands = [f.mapping for f in found]
    calls = []
    returned: set[int] = set()

    def mapper(c, arch, warm=()):
        calls.append((c, warm))
        best = cheapest(op, arch, cands + list(warm))
        if best is not None:
            returned.add(id(best[1]))
        return best

    configs = list(itertools.product((8, 16, 32), repeat=3))
    grid = grid_search(op, base, LEVELS, configs, lambda c, a: mapper(c, a))
    calls.clear()
    returned.clear()
    warm = co_search(op, base, LEVELS, (8, 16, 32), configs, mapper, warm_start=True)
    # The same optimum (the warm mappings are candidates too, each re-costed on its configuration).
    assert warm.value <= grid.value and warm.best is not None
    assert calls[0][1] == ()
    mapped_so_far = set()
    for c, w in calls:
        # Every warm mapping was found on a configuration mapped earlier (or is rule S's incumbent, also one).
        assert len(w) <= 3 and all(id(m) in returned for m in w)
        assert bool(w) == bool(mapped_so_far)
        mapped_so_far.add(c)
