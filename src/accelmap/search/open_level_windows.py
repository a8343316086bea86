"""Rule B37 of docs/mapper.md: at an open level, a sliding-window operand of the innermost loop's dim enters it a
share of its tile at every instance-iteration above it (rule B18 for an open level's tile shapes).

Rules B27 and B35 (``open_level_refills.refill_cases``) count, in the case where the innermost temporal loop above an
open level c runs over dim d, a whole tile at every instance-iteration above c for the operands that use d as a plain
index, and rule B15's orders for the others. A convolution's input uses P and Q only inside sliding-window indices
(``q + s``), so it got only the orders' count: on eyeriss_like a register file keeping S whole and stepping Q outside
it refetches a third of its input window at every step (ResNet-18 layer1.0.conv1: 2.5 million input fills against a
footprint of 215 thousand), which no term counted at the root.

Rule B18's argument, with c's tile shape as the fixed nest (every extent of the row, no fixed loop between c and the
open loops, so the last tile of a run sits at offset 0 of it): take an operand X that uses d in a window index none of
whose other dims has a temporal iteration above c for that shape (with every fan-out above c fixed, ``T_k = 1``: what
is left of k above c is unrolled on those fan-outs, so each instance of c has a fixed offset of k). In the case d, every
step of a loop above c is a step of the innermost loop (over d) or a step of an outer loop while the loops inside it,
the innermost included, wrap back: either way the loops over d telescope, and the window axis moves by at least d's
coefficient times c's extent of d (the innermost loop's stride is at least that extent), either way, while its other
dims stay put. So between two instance-iterations of one instance the new tile overlaps the old by at most the largest
overlap of the tile with itself shifted by such a move (``window_runs.least_new_on_axis``), and the rest enters: X enters
c at least ``tiles above c x tile x share`` times. Each window index alone gives a bound; the largest is taken, and the
case's count for X is the larger of it and the orders' count (both hold for every mapping in the case and order).
"""

from __future__ import annotations

import math

import numpy as np

from accelmap.search.window_runs import least_new_on_axis
from accelmap.workload.index_sets import axis_mask


def window_shares(ctx, d: str, grid: np.ndarray, T: np.ndarray | None, names) -> dict[str, np.ndarray]:
    """Per operand in ``names`` that uses d in a sliding-window index (and not as a plain index), the least share of
    its tile at an open level that every instance-iteration above it brings in rule B7's case d, per tile shape
    (rows of ``grid``, c's extents; ``T`` the temporal iterations above c per row and dim, None when some fan-out
    above c is open: then nothing). 0 where no window index of it qualifies."""
    out: dict[str, np.ndarray] = {}
    if T is None:
        return out
    dims = ctx.op.dim_names
    col = {k: i for i, k in enumerate(dims)}
    for name in names:
        positions = ctx.windows.get((name, d), ())
        if not positions or name in ctx.loose:
            continue
        X = ctx.op.operand(name)
        best = np.zeros(len(grid))
        for pos in positions:
            terms = X.indices[pos].terms
            others = [col[k] for k, _ in terms if k != d]
            # Where the other dims of the index have no temporal iteration above c, every instance-iteration moves
            # the window; else at least the innermost loop's own steps do, (B - 1) / B of them for its bound B, a
            # divisor above 1 of d's temporal iterations: at least (q - 1) / q for q their least prime factor.
            still = (T[:, others] == 1).all(axis=1) if others else np.ones(len(grid), dtype=bool)
            q = least_prime_factor(T[:, col[d]])
            steps = np.where(still, 1.0, (q - 1) / q)
            coeffs = tuple(k for _, k in terms)
            cols = [col[k] for k, _ in terms]
            coeff_d = next(k for k2, k in terms if k2 == d)
            key = grid[:, cols]
            combos, inverse = np.unique(key, axis=0, return_inverse=True)
            share = np.array([least_new_on_axis(coeffs, tuple(int(v) for v in row), 0,
                                                coeff_d * int(row[cols.index(col[d])]))
                              / axis_mask(coeffs, tuple(int(v) for v in row)).bit_count() for row in combos])
            best = np.maximum(best, steps * share[inverse.reshape(-1)])
        out[name] = best
    return out


def least_prime_factor(n: np.ndarray) -> np.ndarray:
    """Per entry of ``n`` (integers >= 1), its least prime factor (1 for 1)."""
    out = np.array(n, dtype=np.float64)
    for v in np.unique(n):
        v = int(v)
        f = next((k for k in range(2, math.isqrt(v) + 1) if v % k == 0), v)
        out[n == v] = f
    return out
