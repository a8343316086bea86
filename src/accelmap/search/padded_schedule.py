"""Rule B32 of docs/mapper.md: a padded unrolling's MAC schedule counts its idle lanes.

The model's compute is the static MAC schedule, the product of the temporal bounds over the MACs per cycle (a partial
last tile still occupies its slots: ``cost/latency.py``, ``latency_rows``). Rule S1 (and the node bound, B1) bounded
it by ``ceil(MACs / PEs)``, which is the schedule of a dividing unrolling but not of a padded one: ResNet-18's P = 56
unrolled 16-wide (4 x 4 over two axes) leaves ``ceil(56 / 16) = 4`` rounds of P for 3.5 rounds of work, so every
mapping with it computes for 8/7 of the MACs over its PEs, and S1 could not tell it from P 4 x Q 4, which divides.

Per dim d with spatial unrolling ``u_d`` (the product of its spatial bounds over every axis), the temporal loops over
d must cover what the spatial ones leave: the product of their bounds, ``t_d``, satisfies ``t_d x u_d >= size_d``
(every position of d is computed; an imperfect loop's partial tile still counts its whole bound), so
``t_d >= ceil(size_d / u_d)``. The temporal loops are a product over dims, so the schedule is at least
``ceil(prod_d ceil(size_d / u_d) / MACs per cycle)``, and ``prod_d ceil(size_d / u_d) >= MACs / PEs`` (each factor is
at least ``size_d / u_d``): never below S1's term, equal to it where the unrolling divides every dim.

In the certificate's relaxation (rule S2) a row gives per class of dims (dims used by the same operands) only the
product of their unrollings; every real unrolling splits that product among the class's dims, so the class's rounds
are at least the fewest over every split (``fewest_rounds``: any split into integer factors, a superset of the real
ones, whose least only lowers the bound).

At a node of the branch and bound with every fan-out fixed (the exact search fixes the unrolling), the fixed temporal
loops give the product ``F`` of their bounds, and each dim's open temporal loops at least ``ceil(rem_d / cap_d)``
(what is left over the most the open fan-outs unroll of it, ``BoundContext.temporal_left``), so the schedule is at
least ``F x prod_d ceil(rem_d / cap_d)`` over the MACs per cycle. With perfect factors that is ``MACs / PEs``; it is
larger only under a padded unrolling (searched over Ruby-S tiles) or imperfect tiles.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from accelmap.mapping.sampling import divisors
from accelmap.workload.operator import Operator


def dim_schedule(op: Operator, macs_per_cycle: int, used: np.ndarray) -> np.ndarray:
    """The least MAC schedule per row of unrollings given per dim (``used`` [row, dim] in ``op.dim_names`` order:
    each dim's product of spatial bounds)."""
    sizes = np.array([op.sizes[d] for d in op.dim_names], dtype=np.int64)
    rounds = -(-sizes // used)
    steps = np.prod(rounds.astype(np.float64), axis=1)
    return np.ceil(steps / macs_per_cycle)


@lru_cache(maxsize=8192)
def fewest_rounds(sizes: tuple[int, ...], product: int) -> int:
    """The least, over every split of ``product`` into integer factors ``u_d`` (one per dim of ``sizes``), of
    ``prod_d ceil(size_d / u_d)``."""
    if len(sizes) == 1:
        return -(-sizes[0] // product)
    s, rest = sizes[0], sizes[1:]
    return min(-(-s // u) * fewest_rounds(rest, product // u) for u in divisors(product))


def class_schedule(op: Operator, macs_per_cycle: int, members: Sequence[Sequence[str]],
                   total: np.ndarray) -> np.ndarray:
    """The least MAC schedule per row of the certificate's class vectors (``total`` [row, class]: each class's
    unrolling; ``members``: the dims of each class)."""
    steps = np.ones(len(total), dtype=np.float64)
    for k, dims in enumerate(members):
        sizes = tuple(op.sizes[d] for d in dims)
        values, inverse = np.unique(total[:, k], return_inverse=True)
        rounds = np.array([fewest_rounds(sizes, int(v)) for v in values], dtype=np.float64)
        steps = steps * rounds[inverse.reshape(-1)]
    return np.ceil(steps / macs_per_cycle)


def node_schedule(fixed_temporal: int, temporal_left: dict[str, int], macs_per_cycle: int) -> int:
    """The least MAC schedule below a node with every fan-out fixed: ``fixed_temporal`` the product of the fixed
    temporal bounds, ``temporal_left`` each dim's fewest open temporal iterations (``BoundContext.temporal_left``)."""
    return -(-(fixed_temporal * math.prod(temporal_left.values())) // macs_per_cycle)
