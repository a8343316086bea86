"""NumPy reference of any operator, and random inputs for it.

The operator is an affine loop nest ``O[...] += X1[...] * X2[...] * ...``; each
input is gathered over its own dimensions (padding reads zero) and the product
is reduced with ``einsum`` into the output's dimensions.
"""

from __future__ import annotations

import string

import numpy as np

from accelmap.codegen.c_source import stored_shape
from accelmap.workload.operator import Operand, Operator

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


def _gather(op: Operator, X: Operand, data: np.ndarray, dims: list[str]) -> np.ndarray:
    """X as an array over ``dims`` (the dims X uses, in operator order)."""
    ext = op.index_extent(X)
    _, pad = stored_shape(op, X)
    padded = np.zeros(ext, dtype=data.dtype)
    src = tuple(slice(0, max(0, min(s, e - p))) for s, e, p in zip(data.shape, ext, pad))
    dst = tuple(slice(p, p + max(0, min(s, e - p))) for s, e, p in zip(data.shape, ext, pad))
    padded[dst] = data[src]
    grids = np.meshgrid(*[np.arange(op.sizes[d]) for d in dims], indexing="ij")
    g = dict(zip(dims, grids))
    idx = tuple(sum(cf * g[d] for d, cf in ix.terms) for ix in X.indices)
    return padded[idx]


def reference(op: Operator, tensors: dict[str, np.ndarray]) -> np.ndarray:
    """The output tensor after the operator ran (prior value included)."""
    letters = dict(zip(op.dim_names, string.ascii_letters))
    O = op.output
    acc = np.float64 if tensors[O.name].dtype == np.float32 else np.int64
    terms, specs = [], []
    for X in op.inputs:
        dims = [d for d in op.dim_names if d in X.dims]
        terms.append(_gather(op, X, tensors[X.name], dims).astype(acc))
        specs.append("".join(letters[d] for d in dims))
    out_dims = [ix.terms[0][0] for ix in O.indices]
    res = np.einsum(",".join(specs) + "->" + "".join(letters[d] for d in out_dims), *terms)
    prior = tensors[O.name].astype(acc)
    return (prior + res).astype(tensors[O.name].dtype)
