"""NumPy reference of an operator and its random test tensors (exact integer arithmetic)."""

from __future__ import annotations

import itertools
import string

import numpy as np

from accelmap.workload.operator import Operand, Operator


def stored_shape(op: Operator, o: Operand) -> tuple[int, ...]:
    return o.shape or op.index_extent(o)


def random_inputs(op: Operator, seed: int = 0) -> dict[str, np.ndarray]:
    """Signed integers spanning each input's precision (int8 inputs: -128..127)."""
    rng = np.random.default_rng(seed)
    out = {}
    for o in op.inputs:
        lo, hi = -(1 << (o.bits - 1)), (1 << (o.bits - 1))
        out[o.name] = rng.integers(lo, hi, size=stored_shape(op, o), dtype=np.int64)
    return out


def index_space(op: Operator, o: Operand, arr: np.ndarray) -> np.ndarray:
    """The operand over its padded index space: stored element v sits at v + pad_lo, zeros elsewhere."""
    ext = op.index_extent(o)
    lo = o.pad_lo or (0,) * len(ext)
    out = np.zeros(ext, dtype=arr.dtype)
    src, dst = [], []
    for e, l, s in zip(ext, lo, arr.shape):
        n = max(0, min(s, e - l))
        src.append(slice(0, n))
        dst.append(slice(l, l + n))
    out[tuple(dst)] = arr[tuple(src)]
    return out


def reference(op: Operator, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """``op`` evaluated directly: fix every non-leading term of a sliding axis, the rest is an einsum."""
    letters = {d: string.ascii_letters[k] for k, d in enumerate(op.dim_names)}
    fixed = sorted({d for o in op.inputs for ix in o.indices for d, _ in ix.terms[1:]})
    padded = {o.name: index_space(op, o, inputs[o.name]) for o in op.inputs}
    out = np.zeros(tuple(op.sizes[ix.dims[0]] for ix in op.output.indices), dtype=np.int64)
    out_sub = "".join(letters[ix.dims[0]] for ix in op.output.indices)
    for vals in itertools.product(*(range(op.sizes[d]) for d in fixed)):
        at = dict(zip(fixed, vals))
        views, subs = [], []
        for o in op.inputs:
            sl, sub = [], ""
            for ix in o.indices:
                (d0, c0), rest = ix.terms[0], ix.terms[1:]
                start = sum(c * at[d] for d, c in rest)
                if d0 in at:          # the leading term is itself fixed elsewhere
                    sl.append(start + c0 * at[d0])
                    continue
                sl.append(slice(start, start + c0 * (op.sizes[d0] - 1) + 1, c0))
                sub += letters[d0]
            views.append(padded[o.name][tuple(sl)])
            subs.append(sub)
        expr = ",".join(subs) + "->" + "".join(c for c in out_sub)
        free = set("".join(subs))
        if not set(out_sub) <= free:
            # An output dim no input uses would be a broadcast; the operator checks forbid it.
            raise ValueError(f"output index of {op.name} not reached by any input")
        out += np.einsum(expr, *views)
    return out
