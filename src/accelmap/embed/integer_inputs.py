"""Random integer inputs for checking intrinsic programs exactly."""

from __future__ import annotations

import numpy as np

from accelmap.workload.numpy_reference import stored_shape
from accelmap.workload.operator import Operator


def random_inputs(op: Operator, seed: int = 0) -> dict[str, np.ndarray]:
    """Signed integers spanning each input's precision (int8 inputs: -128..127)."""
    rng = np.random.default_rng(seed)
    out = {}
    for o in op.inputs:
        lo, hi = -(1 << (o.bits - 1)), (1 << (o.bits - 1))
        out[o.name] = rng.integers(lo, hi, size=stored_shape(op, o), dtype=np.int64)
    return out
