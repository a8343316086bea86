"""The NumPy reference evaluates large reductions in slices without changing a bit of the result."""

import numpy as np
import pytest

import accelmap.poly.reference as ref
from accelmap.poly.dsl import parse_subgraph
from accelmap.poly.library import library_subgraph


@pytest.mark.parametrize("name,sizes", [("conv", dict(N=2, C=32, H=18, W=18, K=16)), ("bn_reduce", {}),
                                        ("softmax_mid", {}), ("matmul", dict(M=64, N=48, K=300))])
def test_sliced_reductions_are_bit_identical(name, sizes, monkeypatch):
    k = parse_subgraph(library_subgraph(name, **sizes), name)
    x = ref.random_inputs(k, seed=1)
    whole = ref.reference(k, x)
    monkeypatch.setattr(ref, "SLICE_POINTS", 100)   # a slice per combination of the leading reduction dims
    sliced = ref.reference(k, x)
    for t in whole:
        assert np.array_equal(whole[t], sliced[t], equal_nan=True)


def test_slices_fix_only_leading_reduction_dims(monkeypatch):
    k = parse_subgraph(library_subgraph("conv", N=1, C=16, H=10, W=10, K=16), "c")
    monkeypatch.setattr(ref, "SLICE_POINTS", 16 * 8 * 8 * 3)
    slices = list(ref._reduction_slices(k.statement("S1")))
    # c (16) and r (3) are fixed per slice, s spans it with the output dims: 48 slices of 16*8*8*3 points
    assert len(slices) == 48 and slices[0][1] == (1, 16, 8, 8, 3)
