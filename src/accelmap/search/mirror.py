"""Mirror unrollings (rule S4 of the mapper's documentation): a relabelling of dims that changes nothing.

A convolution with equal P and Q, equal R and S, and the same stride, dilation and padding along both is
the same operator after swapping P<->Q and R<->S: every operand's index expressions are permuted among its
axes, nothing else moves. The cost model reads a mapping only through the operator (sizes and index
expressions, per operand axis; the order of an operand's axes is never read), the accelerator (which names
no dim, except the pipeline's ``streamed_dims``) and the dims of its loops, so a mapping and its relabelled
image cost the same when the relabelling also fixes ``streamed_dims`` and the user's constraints. The
unrolling of the image is the relabelled unrolling, so one of each mirror pair needs searching.

``dim_symmetry`` finds such a relabelling (an involution, a product of swaps of dims of equal size), or
None; ``mirror_products`` gives the fan-out products (``spatial.fanout_products``) of each row's image.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.search.space import Constraints
from accelmap.workload.operator import Operand, Operator


def _matchings(dims: list[str]) -> list[list[tuple[str, str]]]:
    """Every set of disjoint pairs of ``dims`` (the empty one first)."""
    if not dims:
        return [[]]
    first, rest = dims[0], dims[1:]
    out = _matchings(rest)
    for i, other in enumerate(rest):
        out += [[(first, other), *m] for m in _matchings(rest[:i] + rest[i + 1:])]
    return out


def _axis_key(op: Operand, a: int, swap: dict[str, str]) -> tuple:
    ix = op.indices[a]
    pad = op.pad_lo[a] if op.pad_lo else 0
    shape = op.shape[a] if op.shape else None
    return frozenset((swap.get(d, d), c) for d, c in ix.terms), pad, shape


def operator_invariant(op: Operator, swap: dict[str, str]) -> bool:
    """Whether relabelling dims by ``swap`` maps ``op`` to itself: equal sizes, and each operand's axes
    (index expression, padding, stored extent) a permutation of their relabelled images."""
    if any(op.sizes[a] != op.sizes[b] for a, b in swap.items()):
        return False
    for X in op.operands:
        mine = Counter(_axis_key(X, a, {}) for a in range(len(X.indices)))
        image = Counter(_axis_key(X, a, swap) for a in range(len(X.indices)))
        if mine != image:
            return False
    return True


def _seq(seq, swap: dict[str, str]) -> tuple[str, ...]:
    return tuple(swap.get(d, d) for d in seq)


def constraints_invariant(arch: Accelerator, cons: Constraints, swap: dict[str, str]) -> bool:
    """Whether the accelerator's pipeline and the user's constraints name the swapped dims alike."""
    pipe = arch.compute.pipeline
    if pipe is not None and set(_seq(pipe.streamed_dims, swap)) != set(pipe.streamed_dims):
        return False
    if any({swap.get(d, d): b for d, b in dims.items() if b > 1} != {d: b for d, b in dims.items() if b > 1}
           for dims in cons.spatial.values()):
        return False
    if any(_seq(order, swap) != tuple(order) for order in cons.orders.values()):
        return False
    return all({_seq(s, swap) for s in seqs} == {tuple(s) for s in seqs} for seqs in cons.forbid_orders.values())


def dim_symmetry(op: Operator, arch: Accelerator, cons: Constraints) -> dict[str, str] | None:
    """A relabelling of dims (``{dim: image}``, both directions of every swap) under which the operator,
    the accelerator and the constraints are unchanged, or None. Dims of size 1 are left alone (swapping
    them changes no loop bound)."""
    dims = [d for d in op.dim_names if op.sizes[d] > 1]
    for pairs in _matchings(dims)[1:]:
        swap = {a: b for a, b in pairs} | {b: a for a, b in pairs}
        if operator_invariant(op, swap) and constraints_invariant(arch, cons, swap):
            return swap
    return None


def mirror_mapping(m: Mapping, swap: dict[str, str]) -> Mapping:
    """The mapping with every loop's dim relabelled (same bounds, levels, axes, order and bypass)."""
    return Mapping(tuple(Loop(swap.get(l.dim, l.dim), l.bound, l.level, l.axis) for l in m.loops), m.keep)


def mirror_products(products: np.ndarray, dims: Sequence[str], swap: dict[str, str]) -> np.ndarray:
    """The ``spatial.fanout_products`` rows of the mirror unrollings: each group's dim columns relabelled by
    ``swap``. A mirror is found through its products, so it need not be in the space as the same axes'
    assignment (rule S5 makes any unrolling with those products equivalent)."""
    D = len(dims)
    perm = [list(dims).index(swap.get(d, d)) for d in dims]
    n, groups = len(products), products.shape[1] // D
    return products.reshape(n, groups, D)[:, :, perm].reshape(n, groups * D)
