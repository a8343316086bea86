"""The latency model's edge-tile term in closed form: same numbers as the list it replaced, and its
work does not grow with a loop's bound."""

import time

import numpy as np

from accelmap.arch import get_accelerator
from accelmap.cost.latency import _position_sums
from accelmap.cost.model import evaluate
from accelmap.mapping import Loop, Mapping
from accelmap.workload import gemm


def _listed(size, stride, ext, bound):
    """The computation before the closed form: one list entry per position of the loop."""
    sizes = [min(ext, size - k * stride) for k in range(bound)]
    sizes = [x for x in sizes if x > 0]
    return len(sizes), sum(sizes[0::2]), sum(sizes)


def test_closed_form_equals_the_list_on_small_bounds():
    for size in range(1, 26):
        for stride in range(1, 10):
            for ext in range(1, size + 1):
                for bound in range(1, 22):
                    assert _position_sums(size, stride, ext, bound) == _listed(size, stride, ext, bound), \
                        (size, stride, ext, bound)


def test_a_loop_of_ten_million_evaluates_in_well_under_a_second():
    # tpu_like's UB is double-buffered and keeps the output, so the edge-tile term runs over M's loop.
    arch = get_accelerator("tpu_like")
    op = gemm("g", m=10**7, n=16, k=16, bits={"I": 8, "W": 8, "O": 32})
    m = Mapping((Loop("M", 10**7, 0), Loop("K", 16, 1, "X"), Loop("N", 16, 1, "Y")),
                (frozenset("ABO"), frozenset("ABO"), frozenset("B")))
    evaluate(op, arch, m)   # warm up imports and caches
    t0 = time.process_time()       # CPU time: a parallel test worker on the other core cannot starve it
    res = evaluate(op, arch, m)
    assert time.process_time() - t0 < 0.25
    assert abs(res.latency - 40_000_018) < 1e-3


def test_whole_evaluation_unchanged_with_edge_tiles(monkeypatch):
    """Through evaluate, on imperfect factors (an edge tile on the double-buffered level's loop):
    the closed form and the list give the same latency."""
    import accelmap.cost.latency as lat

    arch = get_accelerator("tpu_like")
    for m_size, bound, inner in [(1000, 334, 3), (999, 100, 10), (1001, 143, 7), (64, 4, 16)]:
        op = gemm("g", m=m_size, n=16, k=16, bits={"I": 8, "W": 8, "O": 32})
        m = Mapping((Loop("M", bound, 0), Loop("M", inner, 1), Loop("K", 16, 1, "X"), Loop("N", 16, 1, "Y")),
                    (frozenset("ABO"), frozenset("ABO"), frozenset("B")))
        new = evaluate(op, arch, m)
        with monkeypatch.context() as mp:
            # the model calls it over rows: the list, element by element
            mp.setattr(lat, "_position_sums", np.vectorize(_listed))
            old = evaluate(op, arch, m)
        assert new.latency == old.latency and new.energy_total == old.energy_total
