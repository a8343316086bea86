"""What an operator computes, in NumPy: the reference every executed program is checked against.

Used by the emitted C (``codegen``) and the intrinsic programs (``embed``) alike, so both are held to
one definition of the operator's semantics: stored tensors are placed into the padded index space
(padding reads zero) and the product of the inputs is summed into the output's dimensions.
"""

from __future__ import annotations

import itertools
import string

import numpy as np

from accelmap.workload.operator import Operand, Operator


def stored_shape(op: Operator, o: Operand) -> tuple[int, ...]:
    """The tensor's shape in memory: its own where given, else its index space."""
    return tuple(o.shape) or op.index_extent(o)


def index_space(op: Operator, o: Operand, arr: np.ndarray) -> np.ndarray:
    """The operand over its padded index space: stored element v sits at v + pad_lo, zeros elsewhere."""
    ext = op.index_extent(o)
    lo = o.pad_lo or (0,) * len(ext)
    out = np.zeros(ext, dtype=arr.dtype)
    src, dst = [], []
    for e, l, s in zip(ext, lo, arr.shape, strict=True):
        n = max(0, min(s, e - l))
        src.append(slice(0, n))
        dst.append(slice(l, l + n))
    out[tuple(dst)] = arr[tuple(src)]
    return out


def reference(op: Operator, inputs: dict[str, np.ndarray], dtype: type = np.int64) -> np.ndarray:
    """``op``'s output from zero, accumulated in ``dtype`` (exact for integers: int64), evaluated
    directly: fix every non-leading term of a sliding axis, the rest is an einsum."""
    letters = {d: string.ascii_letters[k] for k, d in enumerate(op.dim_names)}
    fixed = sorted({d for o in op.inputs for ix in o.indices for d, _ in ix.terms[1:]})
    padded = {o.name: index_space(op, o, np.asarray(inputs[o.name]).astype(dtype)) for o in op.inputs}
    out: np.ndarray = np.zeros(tuple(op.sizes[ix.dims[0]] for ix in op.output.indices), dtype=dtype)
    out_sub = "".join(letters[ix.dims[0]] for ix in op.output.indices)
    for vals in itertools.product(*(range(op.sizes[d]) for d in fixed)):
        at = dict(zip(fixed, vals, strict=True))
        views, subs = [], []
        for o in op.inputs:
            sl: list[int | slice] = []
            sub = ""
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
