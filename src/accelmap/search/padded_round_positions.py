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
"""

from __future__ import annotations

from accelmap.search.imperfect_tiles import ImperfectBoundContext
from accelmap.workload.operator import Operand


class RubySBoundContext(ImperfectBoundContext):
    """The node bounds of ``ImperfectBoundContext`` for a search over Ruby-S tiles (``imperfect="spatial"``: only
    spatial loops imperfect), with rule B44's refetch positions."""

    def __init__(self, op, arch, keep, spatial=None, objective=None):
        super().__init__(op, arch, keep, spatial, objective)
        # Per input X: the deepest level c at which B44 counts X's refetches at every position (the shallowest padded
        # fan-out level holding a padded loop; X's boundaries into levels down to it), or None (the rule is off for X).
        self.every_position_down_to: dict[str, int | None] = dict.fromkeys((o.name for o in op.operands), None)
        axes = arch.fanout_axes()
        if not spatial or any(name not in spatial for name in axes):
            return
        padded = padded_dims(op, spatial)
        levels = [axes[name][0] for name, dims in spatial.items() if any(dims.get(d, 1) > 1 for d in padded)]
        top = min(levels, default=len(arch.levels) - 1)
        for o in op.operands:
            if not o.is_output and not (set(o.dims) & padded):
                self.every_position_down_to[o.name] = top

    def refetch_positions(self, X: Operand, c: int, full: int, prod_r: int) -> int:
        """Rule B44: every one of the ``prod_r`` positions for an input that uses no padded dim at a boundary into a
        level at or above every padded fan-out (module doc); else rule I2's whole positions ``full``."""
        top = self.every_position_down_to[X.name]
        return prod_r if top is not None and c <= top else full


def padded_dims(op, spatial: dict[str, dict[str, int]]) -> frozenset[str]:
    """The dims an unrolling (axis -> {dim: bound}) pads: the product of their bounds does not divide the dim."""
    unrolled: dict[str, int] = {}
    for dims in spatial.values():
        for d, b in dims.items():
            unrolled[d] = unrolled.get(d, 1) * b
    return frozenset(d for d, u in unrolled.items() if op.sizes[d] % u)

