"""The exact search's subtree order (``search/subtree_order.py``, docs/mapper.md rule E1's order): windows of
unrollings below the best found reordered by cheap probes. The order changes what is found within a limit, never what
is covered: every row is cut or visited once, a window of one class is E1's bound order, and the exact search with
the probe order equals the exhaustive optimum, proven."""

from __future__ import annotations

import math

import numpy as np

from accelmap.search import search_exhaustive
from accelmap.search.exact import search_exact
from accelmap.search.objective import collector
from accelmap.search.subtree_order import SubtreeOrder
from test_imperfect_search import _small_cases


def _rows(n: int, seed: int):
    """``n`` rows with random bounds (energy, latency 1) in bound order and random classes of equal products."""
    rng = np.random.default_rng(seed)
    energy = np.sort(rng.uniform(1.0, 10.0, n))[rng.permutation(n)]
    latency = np.ones(n)
    order = np.argsort(energy, kind="stable")
    cls = rng.integers(0, max(1, n // 3), n)
    return order, energy, latency, cls


class _Best:
    """A collector that prunes every bound at or above ``limit`` (what ``TopK.prunes`` does for EDP)."""

    def __init__(self, limit: float):
        self.limit = limit

    def prunes(self, energy: float, latency: float) -> bool:
        return energy * latency >= self.limit

    def threshold(self) -> float:
        return self.limit


def test_a_window_of_one_is_the_bound_order_with_its_tail_cut():
    order, energy, latency, cls = _rows(40, 1)
    best = _Best(float(np.sort(energy)[25]))
    visits = SubtreeOrder(order, energy, latency, cls, best, window=1, probe=lambda rows: [0.0] * len(rows))
    got = list(visits)
    assert got == [int(r) for r in order[:25]] and visits.cut == 15 and visits.probed == 0


def test_probe_order_reorders_within_windows_and_covers_every_row_once():
    """Windows of 4 classes in bound order, each visited by probe value (here: minus the row's index, so the
    latest class of a window first); every row below the limit visited once, the rest counted as cut, and no row of
    a later window before a row of an earlier one."""
    for seed in range(5):
        order, energy, latency, cls = _rows(60, seed)
        limit = float(np.sort(energy)[45])
        visits = SubtreeOrder(order, energy, latency, cls, _Best(limit), window=4,
                              probe=lambda rows: [-float(r) for r in rows])
        got = list(visits)
        assert sorted(got) == sorted(int(r) for r in order[:45]) and visits.cut == 15
        # windows: consecutive runs of the bound order holding 4 classes; the visit keeps their sequence
        windows, seen = [], []
        for r in order[:45]:
            c = int(cls[r])
            if c not in seen and len(seen) == 4:
                windows.append(seen)
                seen = []
            if c not in seen:
                seen.append(c)
        window_of = {}
        k = 0
        for r in order[:45]:
            if int(cls[r]) not in windows[k] if k < len(windows) else False:
                k += 1
            window_of[int(r)] = k
        assert [window_of[r] for r in got] == sorted(window_of[r] for r in got)
        assert visits.reordered >= 1 and visits.probed >= 4


def test_a_row_cut_inside_a_window_does_not_end_the_window():
    """The caller cuts a row at its turn; the rows after it in the same window are still visited (their bounds may
    be lower: the window is in probe order), and the next window is cut whole once its first row is."""
    order = np.arange(6)
    energy = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    cls = np.arange(6)
    best = _Best(4.5)
    visits = SubtreeOrder(order, energy, np.ones(6), cls, best, window=3, probe=lambda rows: [-float(r) for r in rows])
    got = []
    for row in visits:
        got.append(row)
        best.limit = 2.5 if row == 2 else best.limit      # a good mapping found in row 2's subtree
    # window {0, 1, 2} in probe order 2, 1, 0; then row 3's bound 4 >= 2.5: cut with every later row
    assert got == [2, 1, 0] and visits.cut == 3


def test_the_pareto_front_keeps_the_bound_order():
    order, energy, latency, cls = _rows(30, 3)
    front = collector("pareto", 1)
    visits = SubtreeOrder(order, energy, latency, cls, front, window=8, probe=lambda rows: [-float(r) for r in rows])
    assert list(visits) == [int(r) for r in order] and visits.probed == 0 and visits.cut == 0


def test_exact_search_with_the_probe_order_equals_exhaustive():
    """Small accelerators and operators (the exact search without the heuristic's incumbent): with windows of two
    classes reordered by their probes the best equals the exhaustive Ruby-S optimum and
    the search says it is proven, as in bound order; some searches were reordered, so the test sees the order."""
    reordered = compared = 0
    for arch, op in _small_cases(4, max_space=300):
        for objective in ("edp",):
            ref, st_ref = search_exhaustive(op, arch, objective, imperfect="spatial", time_limit=60)
            assert not st_ref.extra.get("timed_out")
            for window in (1, 2):
                got, st = search_exact(op, arch, objective, heuristic=False, time_limit=60, window=window)
                assert not st.extra["timed_out"] and st.extra["proven"], (arch.name, op, objective, window)
                if not ref:
                    assert not got
                    continue
                assert got and math.isclose(got[0].value, ref[0].value, rel_tol=1e-9), (arch.name, op, objective)
                reordered += st.extra["spatial_windows_reordered"]
                compared += 1
    assert compared == 8 and reordered >= 1, (compared, reordered)


def test_probes_above_the_best_found_keep_the_bound_order_and_stop_the_probes():
    """A window none of whose probes beats the best found is visited in bound order, and no later window is probed;
    a class whose probe beats it goes first, and only such classes move."""
    order, energy, latency, cls = _rows(60, 4)
    best = _Best(float(np.sort(energy)[50]))
    calls = []

    def probe(rows):
        calls.append(list(rows))
        return [best.limit * 2.0] * len(rows)
    visits = SubtreeOrder(order, energy, latency, cls, best, window=4, probe=probe)
    assert list(visits) == [int(r) for r in order[:50]] and visits.cut == 10
    assert sum(len(c) for c in calls) == 4 and visits.reordered == 0       # the first window only
    # one class of the first window below the best found: its rows first, the others in bound order
    target = int(cls[order[2]])
    visits = SubtreeOrder(order, energy, latency, cls, best, window=4,
                          probe=lambda rows: [0.5 * best.limit if int(cls[r]) == target else 3.0 * best.limit for r in rows])
    got = list(visits)
    first = [int(r) for r in order[:50]]
    window = []
    for r in first:
        if int(cls[r]) not in {int(cls[x]) for x in window} and len({int(cls[x]) for x in window}) == 4:
            break
        window.append(r)
    moved = [r for r in window if int(cls[r]) == target]
    assert got[:len(window)] == moved + [r for r in window if int(cls[r]) != target]
