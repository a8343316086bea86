"""Rules B49 and B50 (docs/mapper.md): below a padded fan-out, the lanes that never idle refetch as the unclipped nest.

Rule E2 searches a padded spatial unrolling over Ruby-S tiles. Rules B44 and B46-B48 count the fixed nest's refetches
at partial positions only at boundaries into levels at or above every spatial loop over a clipping dim: below such a
fan-out the last round's idle lanes hold nothing, so those boundaries kept rule I2's whole positions, none once the
nest holds the padded dim's last round. On simba_like (P or Q of 7 or 14 over the 4 x 4 PE array) the PE buffers lie
below the padded fan-out, and the leaves of a padded subtree counted no refetch into them: their bounds sat at 0.1-0.2
of their cost and nearly every leaf was costed.

The argument, at a node where every loop over a clipping dim (``padded_round_positions.clipping_dims``) is fixed
(nothing of those dims is left to the open loops):

* An instance of level c (one combination of the spatial loops above c) has, along a dim d, the range
  ``[o, o + E)`` clipped to ``N_d`` at each time, ``E`` the product of d's loops inside c and ``o`` the sum of
  ``index x stride`` over d's loops above c (its lane's spatial ones and the temporal ones' current indices). Open
  loops place the fixed nest along the other dims only, whose loops all divide: no range there is ever clipped or
  empty. Along a clipping dim the largest ``o`` of a lane is its spatial offset plus every temporal loop at its last
  index; the lane is *busy* when that is below ``N_d``: its range is non-empty at every time.
* In the model (docs/cost-model.md, partial tiles) a dim an operand does not use matters to its tile only through
  emptiness. So for an operand X that uses no clipping dim, a busy instance sees exactly the tile sequence of the
  unclipped nest (every tile whole, never emptied): its refetches beyond its first tile are the unclipped nest's per
  instance, ``(part - fi x t) / fi`` (``part`` the unclipped count over the ``fi`` fixed instances above c, all alike
  by translation, ``t`` the tile). Every other instance brings at least its own first tile, which rule B1 counts
  apart. So X's refetches into c are at least ``prod(R) x busy / fi x (part - fi x t)`` (rule B49).
* For X whose clipping dims are all plain indices used by no other index (rule B46's operands), a busy instance's
  ranges along such a d are disjoint intervals over time (a temporal loop above c over d steps by a multiple of
  ``E``), each non-empty, of clipped length at least ``min(E, N_d - o_max)`` over the busy lanes; rule B46's
  argument then holds per busy instance: every change of X's tile brings at least the unclipped change times the
  product of those least shares (rule B50). The output is taken with the same share where rule B47 takes it (what
  enters a level drains from it; the parent's updates and the reloads do not decrease with the count).

The larger of this and rules B44/B46-B48/I2's count is taken (each is a bound). Levels shared along an axis
(``shared_along``: a spatial loop above c inside c's tiles) are left out: the rule reads instances as the spatial
loops above c.
"""

from __future__ import annotations

import itertools
import math

from accelmap.mapping.loopnest import Loop, Mapping, loop_strides
from accelmap.search.padded_partial_refetches import PartialRefetchContext
from accelmap.workload.operator import Operand


class BusyLaneContext(PartialRefetchContext):
    """The Ruby-S node bounds of ``PartialRefetchContext`` (rules B44, B46-B48) with rules B49 and B50's refetches at
    boundaries below a padded fan-out (module doc)."""

    def __init__(self, op, arch, keep, spatial=None, objective=None):
        super().__init__(op, arch, keep, spatial, objective)
        self.busy_lanes = self.pinned and not any(lv.shared_axes for lv in arch.levels)
        self._rem: dict[str, int] = {}
        self._lanes: dict[int, tuple[float, dict[str, int]] | None] = {}

    per_call_attributes = PartialRefetchContext.per_call_attributes | {"_rem", "_lanes"}

    def lower_bound(self, fixed, level, rem, **kw):
        self._rem, self._lanes = rem, {}
        return super().lower_bound(fixed, level, rem, **kw)

    def lane_clips(self, X: Operand, c: int) -> frozenset[str] | None:
        """The clipping dims where the busy-lane rules (B49, B50 and subclasses') count X's refetches at boundary c;
        None where they do not apply or rules B44, B46-B48 count that boundary."""
        if not self.busy_lanes or (X.is_output and not self.output_shares):
            return None
        clips, top = self.clipping()
        if not clips or c <= top:
            return None
        return clips

    def refetch_volume(self, X: Operand, c: int, full: int, prod_r: int, part: float, fi: int, t: int) -> float:
        rest = super().refetch_volume(X, c, full, prod_r, part, fi, t)
        clips = self.lane_clips(X, c)
        if clips is None:
            return rest
        got = self.lanes(c, clips)
        if got is None:
            return rest
        busy, least = got
        ext = dict.fromkeys(self.op.dim_names, 1)
        for l in self._node[0]:
            if l.level >= c:
                ext[l.dim] *= l.bound
        # Clipping dims X uses along which some busy instance's range is clipped at some time (rule B50's shares);
        # along the others every busy instance's range is whole at every time.
        clipped = {d for d in clips & set(X.dims) if least[d] < ext[d]}
        if clipped - self.alone[X.name]:
            return rest         # a window over a clipped range: its overlap is not in proportion
        share = busy
        for d in clipped:
            share *= least[d] / ext[d]
        # ``part`` counts the fixed nest unclipped over its ``fi`` instances, its first tiles too.
        return max(rest, prod_r * share * (part - fi * self.tile_of(X, ext)))

    def lanes(self, c: int, clips: frozenset[str]) -> tuple[float, dict[str, int]] | None:
        """(The share of the fixed instances above c that are busy, per clipping dim the least clipped length of a
        busy instance's range at any time), or None where the rule does not apply: some clipping dim has open loops
        left, or no instance is busy (module doc)."""
        if c in self._lanes:
            return self._lanes[c]
        out = self._lanes[c] = self._busy(c, clips)
        return out

    def _busy(self, c: int, clips: frozenset[str]) -> tuple[float, dict[str, int]] | None:
        if any(self._rem.get(d, 1) > 1 for d in clips):
            return None
        fixed: tuple[Loop, ...] = self._node[0]
        strides = loop_strides(Mapping(fixed, ()))
        busy = 1.0
        least: dict[str, int] = {}
        for d in clips:
            n = self.op.sizes[d]
            inner = math.prod(l.bound for l in fixed if l.dim == d and l.level >= c)
            lanes = [(l.bound, s) for l, s in zip(fixed, strides, strict=True)
                     if l.dim == d and l.level < c and l.spatial]
            latest = sum((l.bound - 1) * s for l, s in zip(fixed, strides, strict=True)
                         if l.dim == d and l.level < c and not l.spatial)
            # Every lane's offset at the last time: its spatial offset plus every temporal loop at its last index.
            ends = [latest + sum(i * s for i, (_, s) in zip(idx, lanes, strict=True))
                    for idx in itertools.product(*(range(b) for b, _ in lanes))]
            kept = [o for o in ends if o < n]
            if not kept:
                return None
            busy *= len(kept) / len(ends)
            least[d] = min(inner, n - max(kept))
        return busy, least
