"""The vectorized sizes and overlaps of two-term window axes (``cost.nest_rows``) equal the exact set counts of
``workload.index_sets`` on random extents and shifts, the stride-1 shortcut (equal coefficients) included."""

import numpy as np
import pytest

from accelmap.cost.nest_rows import axis_overlap, axis_size
from accelmap.workload import index_sets


@pytest.mark.parametrize("coeffs", [(1, 1), (2, 2), (1, 2), (2, 1), (2, 3), (3, 1)])
def test_window_axis_size_and_overlap_equal_the_exact_counts(coeffs):
    rng = np.random.default_rng(sum(coeffs) * 10 + coeffs[0])
    n = 300
    e1, e2 = rng.integers(1, 9, n), rng.integers(1, 9, n)
    e1[:8], e2[:8] = 1, [1, 2, 3, 4, 5, 6, 7, 8]          # progressions of one term and single points
    size, holes = axis_size(coeffs, [e1, e2])
    exact = [index_sets.axis_size(coeffs, (int(a), int(b))) for a, b in zip(e1, e2, strict=True)]
    assert size.tolist() == exact
    # shifts per class (2 classes x rows), as the transition classes give them: a loop's stride less the resets
    s1, s2 = rng.integers(-6, 7, (2, n)), rng.integers(-6, 7, (2, n))
    ov = axis_overlap(coeffs, [e1, e2], [s1, s2], size, holes)
    assert ov.shape == (2, n)
    for k in range(2):
        for r in range(n):
            e = (int(e1[r]), int(e2[r]))
            assert ov[k, r] == index_sets.axis_overlap(coeffs, e, e, (int(s1[k, r]), int(s2[k, r])))
