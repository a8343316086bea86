"""Rule B62 (docs/mapper.md): below a padded fan-out, the instances whose range is never clipped refetch as the
unclipped nest, whatever index X reads the clipping dim by.

Rules B49 and B50 (``padded_busy_lanes``) count, at a boundary c below a padded fan-out, the refetches of an operand
that uses no clipping dim (every busy instance) or uses each clipping dim as a plain index of its own (a least share);
an operand reading a clipping dim through a sliding window (a convolution's input over P and R) got neither, and its
refetches into the PE buffers of simba_like counted nothing: ResNet-18 layer4.0.conv2's leaves of its padded subtree
sat at 0.06 of their energy, and nearly every one was costed.

The argument, at a node where every loop over a clipping dim is fixed (as for rule B49). An instance of c has, along
a clipping dim d, the range ``[o, o + E)`` at each time, ``E`` the product of d's loops at or below c, ``o`` its
spatial offset plus the temporal loops above c (``o`` grows with time, largest at every such loop's last index). If
``o + E <= N_d`` at that last time, the range is whole at every time: along d the instance sees the unclipped nest's
ranges exactly. Along a clipping dim X does not use, a range non-empty at the last time is non-empty at every time,
and such a dim matters to X's tile only through emptiness (model, partial tiles). The other dims divide: open loops
place the nest along them only, and nothing there clips. So an instance with every clipping dim X uses whole and every
other non-empty at the last time (*interior* for X) has the unclipped nest's tile sequence, whatever X's index
expressions: its refetches beyond its first tile are ``(part - fi x t) / fi`` per position of the open loops, as rule
B49 argues (``part``: the unclipped count over the ``fi`` fixed instances above c, all alike by translation). The
instances along different dims vary independently (each spatial loop is over one dim), so the interior ones are a
product of per-dim shares. X's refetches into c are at least ``prod(R) x interior share x (part - fi x t)``; the larger
of this and rules B44/B46-B50's count is taken (each is a bound). The output is taken where rule B47 takes it.
"""

from __future__ import annotations

import itertools
import math

from accelmap.mapping.loopnest import Loop, Mapping, loop_strides
from accelmap.search.padded_busy_lanes import BusyLaneContext
from accelmap.workload.operator import Operand


class InteriorLaneContext(BusyLaneContext):
    """``BusyLaneContext`` with rule B62's refetches of the interior instances below a padded fan-out (module doc)."""

    def __init__(self, op, arch, keep, spatial=None, objective=None):
        super().__init__(op, arch, keep, spatial, objective)
        self._interior: dict[tuple[str, int], float] = {}

    per_call_attributes = BusyLaneContext.per_call_attributes | {"_interior"}

    def lower_bound(self, fixed, level, rem, **kw):
        self._interior = {}
        return super().lower_bound(fixed, level, rem, **kw)

    def refetch_volume(self, X: Operand, c: int, full: int, prod_r: int, part: float, fi: int, t: int) -> float:
        rest = super().refetch_volume(X, c, full, prod_r, part, fi, t)
        clips = self.lane_clips(X, c)
        if clips is None:
            return rest
        key = (X.name, c)
        share = self._interior.get(key)
        if share is None:
            share = self._interior[key] = interior_share(self.op, self._node[0], self._rem, c, clips, X)
        if not share:
            return rest
        return max(rest, prod_r * share * (part - fi * t))


def interior_share(op, fixed: tuple[Loop, ...], rem: dict[str, int], c: int, clips: frozenset[str],
                   X: Operand) -> float:
    """The share of the fixed instances above c that are interior for X (module doc): along each clipping dim X uses,
    the range whole at the last time, along the others non-empty; 0 where some clipping dim has open loops left."""
    if any(rem.get(d, 1) > 1 for d in clips):
        return 0.0
    strides = loop_strides(Mapping(fixed, ()))
    share = 1.0
    for d in clips:
        n = op.sizes[d]
        inner = math.prod(l.bound for l in fixed if l.dim == d and l.level >= c)
        lanes = [(l.bound, s) for l, s in zip(fixed, strides, strict=True) if l.dim == d and l.level < c and l.spatial]
        latest = sum((l.bound - 1) * s for l, s in zip(fixed, strides, strict=True)
                     if l.dim == d and l.level < c and not l.spatial)
        ends = [latest + sum(i * s for i, (_, s) in zip(idx, lanes, strict=True))
                for idx in itertools.product(*(range(b) for b, _ in lanes))]
        reach = inner if d in X.dims else 1
        kept = sum(1 for o in ends if o + reach <= n)
        if not kept:
            return 0.0
        share *= kept / len(ends)
    return share
