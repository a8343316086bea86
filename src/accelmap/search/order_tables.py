"""Rule O2's non-dominated orders of a level from tables of terms, all orders at once (NumPy).

``orders._pruned`` gives each order of a level's temporal loops its vector of counters (per operand and boundary
below the level, ``_LevelCounter.entering``) and keeps the orders whose vectors no other order's dominates. Walking
each order loop by loop costs a Python step per loop per order. With one loop per dim (as the search builds a
level), the term a loop adds to a counter depends only on the loop and on the *set* of loops after it, not on their
order:

* the count is ``inst * (tile + P * deeper + sum_n prefix_n * (B_n - 1) * moved_n)``, where ``P`` is the product of
  the level's bounds and ``prefix_n`` the product of the loops before loop n: ``P / (B_n * prod(after n))``;
* ``moved_n`` (what a step of loop n brings) reads the wrap-back of the loops after it, a sum over them of
  ``(B - 1) * stride`` per dim of the operand, each loop's stride being its dim's span below the level (one loop per
  dim): a function of the set.

So each counter is a table over (loop, set of later loops), ``k * 2^(k-1)`` terms for ``k`` loops (every order's
steps, ``k * k!``, are looked up in it), and an order's vector is a sum of table entries, gathered for every order
in one operation. The non-dominated orders are then found with array comparisons; the orders kept, their
representatives among equal vectors (the first in the given order) and the order they are returned in are those of
``orders.pareto`` over the vectors (``tests/test_search_order_tables.py`` checks both on random operators).
"""

from __future__ import annotations

import numpy as np

# Below this many orders the scalar walk (``orders._pruned``) is as cheap as the tables' NumPy calls.
TABLE_ORDERS = 120
# Counts kept in int64 only while every sum stays below this (else the scalar walk, on Python integers).
_INT_LIMIT = 1 << 62


def order_terms(counter, temporal: tuple) -> tuple[int, list[int]]:
    """``counter`` (a ``_LevelCounter``) over the orders of ``temporal`` (the level's loops, distinct dims): the
    count's order-free part and, per (loop i, set of later loops as a bit mask), ``inst`` times the loop's term; the
    entry is at ``i * 2^k + mask`` (0 where i is in the mask)."""
    k = len(temporal)
    full = 1 << k
    total = 1
    for l in temporal:
        total *= l.bound
    span = counter.dim_span
    step = counter._step
    states: list[tuple[int, ...]] = [counter._state] * full
    products = [1] * full
    terms = [0] * (k * full)
    inst = counter.inst
    for mask in range(full):
        if mask:
            j = (mask & -mask).bit_length() - 1
            prev = mask ^ (1 << j)
            l = temporal[j]
            states[mask] = step(l.dim, l.bound, span[l.dim], states[prev])[1]
            products[mask] = products[prev] * l.bound
        state, below = states[mask], products[mask]
        for i, l in enumerate(temporal):
            if not mask >> i & 1:
                moved = step(l.dim, l.bound, span[l.dim], state)[0]
                if moved:
                    terms[i * full + mask] = inst * (total // (l.bound * below)) * (l.bound - 1) * moved
    return inst * (counter.tile + total * counter.deeper), terms


def pareto_orders(counters: list, perms: list[tuple]) -> tuple | None:
    """The orders of ``perms`` that ``orders.pareto`` keeps over the vectors of ``counters``' counts, in its order;
    None where the tables do not apply (fewer than ``TABLE_ORDERS`` orders, a dim twice, orders not of one set of
    loops, counts past int64's safe range): the caller walks the orders then."""
    got = pareto_order_counts(counters, perms)
    return None if got is None else tuple(p for p, _ in got)


def pareto_order_counts(counters: list, perms: list[tuple]) -> list[tuple[tuple, tuple[int, ...]]] | None:
    """``pareto_orders`` with each order's vector of counts (one per counter, Python integers), or None."""
    if len(perms) < TABLE_ORDERS or not counters:
        return None
    temporal = perms[0]
    k = len(temporal)
    if len({l.dim for l in temporal}) < k:
        return None
    position = {id(l): i for i, l in enumerate(temporal)}
    try:
        index = np.array([[position[id(l)] for l in p] for p in perms], dtype=np.int64)
    except KeyError:
        return None
    if index.shape != (len(perms), k) or (np.sort(index, axis=1) != np.arange(k)).any():
        return None
    bits = np.left_shift(1, index)
    later = np.cumsum(bits[:, ::-1], axis=1)[:, ::-1] - bits     # per position, the loops after it
    cells = index * (1 << k) + later
    columns = []
    for counter in counters:
        base, terms = order_terms(counter, temporal)
        if base + k * max(terms) >= _INT_LIMIT // max(1, len(counters)):
            return None
        columns.append(base + np.array(terms, dtype=np.int64)[cells].sum(axis=1))
    vectors = np.stack(columns, axis=1)
    # The first order of each distinct vector (a stable sort keeps the first occurrence), then those no other
    # distinct vector dominates (componentwise <=; distinct, so strictly smaller somewhere).
    _, first = np.unique(vectors, axis=0, return_index=True)
    first.sort()
    V = vectors[first]
    below = np.asarray((V[:, None, :] <= V[None, :, :]).all(axis=2))
    below[np.arange(len(V)), np.arange(len(V))] = False
    kept = first[~below.any(axis=0)]
    # ``pareto``'s order: by the sum of the vector, then the vector, then the given order (none equal here).
    K = vectors[kept]
    rank = np.lexsort(tuple(K[:, j] for j in range(K.shape[1] - 1, -1, -1)) + (K.sum(axis=1),))
    return [(perms[i], tuple(int(v) for v in vectors[i])) for i in kept[rank]]
