"""Rule B44 (docs/mapper.md): over Ruby-S tiles, an input that uses no padded dim refetches at every position.

Rule E2 searches a padded spatial unrolling (an output dim unrolled by a bound that does not divide it, the last
round partial) over Ruby-S tiles: the spatial loops are the only imperfect ones, the temporal loops divide what the
unrolling leaves. The node bounds then count the fixed nest's refetches only at its whole positions (rule I2), and a
nest that holds a padded spatial loop has none once the last round is fixed in it (``floor(N / P) = 0`` along the
padded dim): at the exact search's leaves every input's refetches at every boundary counted nothing, and nearly every
leaf was costed.

Two facts of the model (docs/cost-model.md, partial tiles) make them count again for some operands:

* X's tile at level c is X's index set over the ranges of the dims X uses, clipped to the operator; a dim X does not
  use never clips it. So where every tile of c is non-empty, X's tiles at c, and every transition between them, are
  those of the same nest without clipping: translation-invariant, the fixed nest's own count at every position.
* Over Ruby-S tiles every tile of a level c whose tile holds every spatial loop over a padded dim (each such loop at a
  level at or below c in the nest, i.e. its fan-out at level c or deeper) is non-empty: along a padded dim d the
  temporal loops divide the rounds ``ceil(N_d / u_d)`` (``u_d`` the unrolling of d), so every combination of their
  iterations starts a round ``k < ceil(N_d / u_d)``, at ``k u_d < N_d``; along the other dims every factor divides.
  (Below a padded fan-out the last round's idle lanes hold nothing: there the rule does not apply.)

So for an input X that uses no padded dim and a boundary c at or above every padded fan-out, rule B1's fixed-nest
refetches hold at all ``prod(R)`` positions, not only at the whole ones. The output uses every padded dim (rule E2
pads output dims only), so it never qualifies; an input whose sliding window spans a padded dim uses it and does
not either. The padded dims and their fan-out levels are known only when every fan-out is fixed in advance (as the
exact search fixes the unrolling): otherwise the rule is off.

"Padded" is read from the nest, not from the unrolling alone (session 16): a temporal loop below a fan-out may divide a
dim while the fan-out's bound, which divides the dim, does not divide what that loop leaves (P = 6 as a register's 2
under a spatial 2: 3 rounds of 2, the last partial), and the dim's tiles clip then as a padded dim's do. Counting
such an input at every position put the node bound above the cost of a Ruby-S mapping (tpu_like, a 3x3x6x4 convolution,
K padded as 2 on one axis, P as 2 on the other under a register's P2: 562,553 pJ against the mapping's 555,881 at the
leaf). So a dim *clips* at a node (``clipping_dims``) when the fixed nest's product of its loops does not divide it, or
when an open spatial loop over it may not divide what it is dealt (only one on the next level to fix, dividing what
the fixed nest leaves, surely does: an open temporal loop below it could leave a rest it does not divide); every other
dim's loops all divide (the open temporal ones divide what is left), so its tiles are whole at every level. The rule takes the clipping dims for the padded ones.
"""

from __future__ import annotations

from accelmap.mapping.loopnest import Loop
from accelmap.search.imperfect_tiles import ImperfectBoundContext
from accelmap.workload.operator import Operand


class RubySBoundContext(ImperfectBoundContext):
    """The node bounds of ``ImperfectBoundContext`` for a search over Ruby-S tiles (``imperfect="spatial"``: only
    spatial loops imperfect), with rule B44's refetch positions."""

    def __init__(self, op, arch, keep, spatial=None, objective=None):
        super().__init__(op, arch, keep, spatial, objective)
        axes = arch.fanout_axes()
        # The rule needs every fan-out's unrolling (as E1 fixes it): per dim, the fan-out levels unrolling it and the
        # product of its bounds on each.
        self.pinned = bool(spatial) and all(name in spatial for name in axes)
        self.unrolled: dict[str, dict[int, int]] = {d: {} for d in op.dim_names}
        if spatial and self.pinned:
            for name, dims in spatial.items():
                lv = axes[name][0]
                for d, b in dims.items():
                    if b > 1:
                        self.unrolled[d][lv] = self.unrolled[d].get(lv, 1) * b
        self._node: tuple[tuple[Loop, ...], int] = ((), self.nlev)
        self._clips: tuple[frozenset[str], int] | None = None

    # ``lower_bound`` keeps its node here for ``clipping``: the node parts (keyed by that node) stay valid.
    per_call_attributes = ImperfectBoundContext.per_call_attributes | {"_node", "_clips"}

    def lower_bound(self, fixed, level, rem, **kw):
        self._node, self._clips = (fixed, level), None
        return super().lower_bound(fixed, level, rem, **kw)

    def clipping(self) -> tuple[frozenset[str], int]:
        """The node's clipping dims (``clipping_dims``) and the shallowest fan-out level with a spatial loop over one
        of them (the level count when none clips): the rule counts boundaries into levels at or above it."""
        if self._clips is None:
            clips = clipping_dims(self.op, self.unrolled, *self._node)
            self._clips = clips, min((lv for d in clips for lv in self.unrolled[d]), default=self.nlev)
        return self._clips

    def refetch_positions(self, X: Operand, c: int, full: int, prod_r: int) -> int:
        """Rule B44: every one of the ``prod_r`` positions for an input that uses no clipping dim at a boundary into a
        level at or above every spatial loop over a clipping dim (module doc); else rule I2's whole positions."""
        if not self.pinned or X.is_output:
            return full
        clips, top = self.clipping()
        return prod_r if c <= top and not (clips & set(X.dims)) else full


def clipping_dims(op, unrolled: dict[str, dict[int, int]], fixed: tuple[Loop, ...], level: int) -> frozenset[str]:
    """The dims some tile of a Ruby-S completion of the node (``fixed``: the levels from ``level`` inward) may clip:
    the fixed nest's product of the dim's loops does not divide it, or the open spatial loops over it (``unrolled``:
    per dim, fan-out level -> product of its bounds there) may not divide what it leaves (module doc)."""
    prod = dict.fromkeys(op.dim_names, 1)
    for l in fixed:
        prod[l.dim] *= l.bound
    clips = set()
    for d, n in op.sizes.items():
        open_levels = {lv: b for lv, b in unrolled[d].items() if lv < level}
        # An open spatial loop divides what it is dealt only for sure when nothing can sit between it and the fixed
        # nest: it is on the next level to fix (level - 1; its own temporal loop is outside it) and divides what the
        # fixed nest leaves (a temporal loop between could leave a rest it does not divide: 6 as 2 then 2 leaves 3).
        if n % prod[d] or (open_levels and (set(open_levels) != {level - 1}
                                            or (n // prod[d]) % open_levels[level - 1])):
            clips.add(d)
    return frozenset(clips)


def padded_dims(op, spatial: dict[str, dict[str, int]]) -> frozenset[str]:
    """The dims an unrolling (axis -> {dim: bound}) pads: the product of their bounds does not divide the dim."""
    unrolled: dict[str, int] = {}
    for dims in spatial.values():
        for d, b in dims.items():
            unrolled[d] = unrolled.get(d, 1) * b
    return frozenset(d for d, u in unrolled.items() if op.sizes[d] % u)
