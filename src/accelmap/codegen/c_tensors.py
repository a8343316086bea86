"""The tensors a generated C program runs on: random inputs in its C types, and the output it must give.

The expected output is the operator's NumPy reference (``workload.numpy_reference``) added to the
output's prior value, in the output's C type.
"""

from __future__ import annotations

import numpy as np

from accelmap.codegen.c_source import stored_shape
from accelmap.workload.numpy_reference import reference as operator_reference
from accelmap.workload.operator import Operator

NP_TYPES = {"int8_t": np.int8, "int16_t": np.int16, "int32_t": np.int32, "int64_t": np.int64, "float": np.float32}


def random_inputs(op: Operator, dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Stored tensors of every operand; the output holds its prior value (zero unless init_output is read)."""
    from accelmap.codegen.c_source import c_type

    out = {}
    for X in op.operands:
        shape, _ = stored_shape(op, X)
        t = NP_TYPES[c_type(X, dtype)[0]]
        if X.is_output and op.init_output == "zero":
            out[X.name] = np.zeros(shape, dtype=t)
        elif dtype == "fp32":
            out[X.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            out[X.name] = rng.integers(-128, 128, size=shape).astype(t)
    return out


def reference(op: Operator, tensors: dict[str, np.ndarray]) -> np.ndarray:
    """The output tensor after the operator ran (prior value included), in the output's type."""
    out = tensors[op.output.name]
    acc = np.float64 if out.dtype == np.float32 else np.int64
    res = operator_reference(op, {X.name: tensors[X.name] for X in op.inputs}, acc)
    return (out.astype(acc) + res).astype(out.dtype)
