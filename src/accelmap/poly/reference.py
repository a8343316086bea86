"""NumPy reference of a subgraph, and random inputs for it.

Semantics shared with the generated C: integer expressions are evaluated in 64 bits and wrap
to the output's dtype when stored (``cast`` wraps where it is written); floating-point
expressions are evaluated in double precision and rounded to the output's dtype on store.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from accelmap.poly.kernel import DTYPES, Access, Call, Const, Expr, Iter, Kernel, Statement, is_float


def random_inputs(k: Kernel, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for t in k.inputs:
        if is_float(t.dtype):
            out[t.name] = rng.uniform(-2, 2, t.shape).astype(DTYPES[t.dtype][2])
        else:
            hi = {"int8": 8, "int16": 64}.get(t.dtype, 100)
            out[t.name] = rng.integers(-hi, hi, t.shape).astype(DTYPES[t.dtype][2])
    return out


def _wide(dtype: str) -> type:
    return np.float64 if is_float(dtype) else np.int64


def _eval(e: Expr, env: dict[str, np.ndarray], mem: dict[str, np.ndarray], dtypes: dict[str, str]) -> np.ndarray:
    if isinstance(e, Const):
        return np.asarray(e.value)
    if isinstance(e, Iter):
        return env[e.dim].astype(np.int64)
    if isinstance(e, Access):
        idx = tuple(np.asarray(ix.evaluate(env)) for ix in e.index)
        return mem[e.tensor][idx].astype(_wide(dtypes[e.tensor]))
    assert isinstance(e, Call)
    a = [_eval(x, env, mem, dtypes) for x in e.args]
    op = e.op
    if op == "cast":
        np_t = DTYPES[e.dtype][2]
        with np.errstate(over="ignore", invalid="ignore"):
            v = a[0].astype(np_t) if is_float(e.dtype) or not np.issubdtype(a[0].dtype, np.floating) \
                else np.trunc(a[0]).astype(np.int64).astype(np_t)
        return v.astype(_wide(e.dtype))
    if op == "neg":
        return -a[0]
    if op == "abs":
        return np.abs(a[0])
    if op in ("sqrt", "exp"):
        with np.errstate(invalid="ignore", over="ignore"):   # NaN / inf as C gives them
            return np.sqrt(a[0]) if op == "sqrt" else np.exp(a[0])
    if op == "select":
        return np.where(a[0], a[1], a[2])
    fns = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "max": np.maximum,
           "min": np.minimum, "==": np.equal, "<": np.less, ">": np.greater, "<=": np.less_equal,
           ">=": np.greater_equal}
    return fns[op](a[0], a[1])


def _store_cast(v: np.ndarray, dtype: str) -> np.ndarray:
    np_t = DTYPES[dtype][2]
    if is_float(dtype):
        return v.astype(np_t)
    return np.asarray(v).astype(np.int64).astype(np_t)   # wraps modulo 2^bits, as the C code does


# Points of a reduction's domain evaluated at once: the index grids of a slice take 8 bytes per point and dim,
# so a full-size convolution (115 M points, 8 dims) would need 7 GB in one piece.
SLICE_POINTS = 1 << 20


def run_statement(s: Statement, mem: dict[str, np.ndarray], dtypes: dict[str, str]) -> None:
    out = mem[s.out.tensor]
    dtype = dtypes[s.out.tensor]
    if s.kind == "update":
        acc: np.ndarray = out.astype(_wide(dtype))
        for env, shape in _reduction_slices(s):
            idx = tuple(np.broadcast_to(np.asarray(ix.evaluate(env)), shape) for ix in s.out.index)
            val = np.broadcast_to(_eval(s.body, env, mem, dtypes), shape)
            # the reduction dims map to the same output element
            (np.maximum if s.combine == "max" else np.add).at(acc, idx, val)
        out[...] = _store_cast(acc, dtype)
        return
    shape = tuple(n for _, n in s.dims)
    grids = np.indices(shape, dtype=np.int64) if shape else np.zeros((0,), dtype=np.int64)
    env = {d: grids[i] for i, d in enumerate(s.dim_names)}
    idx = tuple(np.broadcast_to(np.asarray(ix.evaluate(env)), shape) for ix in s.out.index)
    if s.kind == "init":   # the reduction's identity
        assert isinstance(s.body, Const)
        out[idx] = s.body.value
        return
    val = np.broadcast_to(_eval(s.body, env, mem, dtypes), shape)
    out[idx] = _store_cast(val, dtype)


def _reduction_slices(s: Statement):
    """(dims -> index grids, shape) covering a reduction's domain in slices of at most SLICE_POINTS points: the
    leading reduction dims are fixed per slice, in lexicographic order, the others span the slice. Every output
    element is still updated in lexicographic order of the reduction dims (within a slice ``ufunc.at`` goes in
    C order), so the result does not depend on the slicing."""
    dims = list(s.dims)
    fixed: list[tuple[str, int]] = []
    for d, n in dims:
        rest = math.prod(m for e, m in dims if e not in {f for f, _ in fixed})
        if rest <= SLICE_POINTS or d not in s.reduce_dims:
            continue
        fixed.append((d, n))
    free = [(d, n) for d, n in dims if d not in {f for f, _ in fixed}]
    shape = tuple(n for _, n in free)
    grids = np.indices(shape, dtype=np.int64) if shape else np.zeros((0,), dtype=np.int64)
    base = {d: grids[i] for i, (d, _) in enumerate(free)}
    for values in itertools.product(*(range(n) for _, n in fixed)):
        env = dict(base)
        env.update({d: np.int64(v) for (d, _), v in zip(fixed, values, strict=True)})
        yield env, shape


def reference(k: Kernel, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every computed tensor, evaluated definition by definition."""
    dtypes = {t.name: t.dtype for t in k.inputs + k.computed}
    mem = dict(inputs)
    for t in k.computed:
        mem[t.name] = np.zeros(t.shape, dtype=DTYPES[t.dtype][2])
    for s in k.statements:
        run_statement(s, mem, dtypes)
    return {t.name: mem[t.name] for t in k.computed}
