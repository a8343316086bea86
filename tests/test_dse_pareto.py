"""Pareto fronts against brute force over random points."""

import itertools
import random

import numpy as np

from accelmap.dse.pareto import dominated


def _brute(vals):
    out = []
    for i, a in enumerate(vals):
        out.append(any(all(b[k] <= a[k] for k in range(len(a))) and any(b[k] < a[k] for k in range(len(a)))
                       for j, b in enumerate(vals) if j != i))
    return out


def test_dominated_matches_brute_force():
    rng = random.Random(7)
    for n, d in itertools.product((1, 2, 5, 30), (2, 3)):
        vals = [[rng.choice((1.0, 2.0, 3.0, 4.0)) for _ in range(d)] for _ in range(n)]
        assert dominated(np.array(vals)).tolist() == _brute(vals)


def test_equal_points_do_not_dominate_each_other():
    assert dominated(np.array([[1.0, 2.0], [1.0, 2.0], [2.0, 2.0]])).tolist() == [False, False, True]
