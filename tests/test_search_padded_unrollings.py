"""Rule E2 of docs/mapper.md: the exact search covers every spatial unrolling, padded ones included (an output dim
unrolled by any bound that does not divide it, the last round partial), each padded one searched over Ruby-S tiles
(temporal loops dividing what the unrolling leaves). Its optimum is the exhaustive optimum of that space."""

from __future__ import annotations

import math

from accelmap.search import Constraints, search_exhaustive
from accelmap.search.exact import search_exact
from accelmap.search.mapper import map_operator
from accelmap.workload import gemm
from test_imperfect_search import _small_cases, row_of_four


def test_exact_search_covers_every_padded_unrolling():
    """On small accelerators whose fan-out does not divide every dim (sizes 3, 5, 7 on axes of 2-4), the exact
    search (no heuristic incumbent, default perfect tiles) equals the exhaustive optimum over every unrolling with
    temporal loops dividing what is left (exhaustive Ruby-S), every objective, and says it is proven; on some
    cases that optimum is strictly better than the perfect-factorization one (a padded unrolling wins), so the
    test sees a search that leaves padded unrollings out."""
    compared = padded_wins = padded_searched = 0
    for arch, op in [case for case in _small_cases(12, max_space=300) if _pads(*case)]:
        for objective in ("energy", "latency", "edp"):
            ref, st_ref = search_exhaustive(op, arch, objective, imperfect="spatial", time_limit=60)
            perfect, _ = search_exhaustive(op, arch, objective, time_limit=60)
            got, st = search_exact(op, arch, objective, heuristic=False, time_limit=60)
            assert not st_ref.extra.get("timed_out") and not st.extra["timed_out"]
            if not ref:
                assert not got
                continue
            assert got and math.isclose(got[0].value, ref[0].value, rel_tol=1e-9), (arch.name, op, objective)
            assert st.extra["proven"]
            padded_searched += st.extra["spatial_padded_searched"]
            padded_wins += not perfect or ref[0].value < perfect[0].value * (1 - 1e-9)
            compared += 1
    assert compared >= 15 and padded_wins >= 2 and padded_searched >= 5, (compared, padded_wins, padded_searched)


def _pads(arch, op) -> bool:
    """Whether some output dim has an unrolling bound on some fan-out axis that does not divide it."""
    axes = [a.size for lv in arch.levels if lv.fanout for a in lv.fanout.axes]
    return any(s % b for d, s in op.dims if d in op.output.dims for a in axes for b in range(2, min(s, a) + 1))


def test_map_operator_searches_a_padded_constraint_exactly():
    """`--strategy optimal` with a spatial constraint that pads (M=5 as rounds of 3 on a 4-wide axis) searches it over
    Ruby-S tiles (it used to refuse it as "perfect factorizations only"): its optimum equals the exhaustive Ruby-S
    optimum under the same constraint, every objective, and it says it is proven."""
    arch = row_of_four()
    op = gemm("g", m=5, n=2, k=2)
    padded = Constraints(spatial={"X": {"M": 3}})
    for objective, want in (("energy", 1512.0), ("latency", 8.0), ("edp", 12096.0)):
        ref, st_ref = search_exhaustive(op, arch, objective, constraints=padded, imperfect="spatial", time_limit=60)
        res = map_operator(op, arch, objective, strategy="optimal", constraints=padded, time_limit=20)
        assert not st_ref.extra.get("timed_out") and ref[0].value == want
        assert res.best is not None and res.proven_optimal and res.best.value == want, objective
        assert res.best.mapping.dim_product("M") == 6          # two rounds of 3: the constraint's padding
