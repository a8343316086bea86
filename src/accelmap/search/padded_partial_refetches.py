"""Rule B46 (docs/mapper.md): over Ruby-S tiles, an input's refetches at a partial position count its last tile's share.

Rule E2 searches a padded spatial unrolling over Ruby-S tiles (spatial loops imperfect, temporal loops dividing what
the loops inside them leave). The node bounds count the fixed nest's refetches only at its whole positions (rule I2);
rule B44 counts them at every position for an input that uses no dim whose tiles clip. An input that uses such a dim
(vta_like's weights over a padded K, say) counted nothing once the nest held that dim's last round, so at the leaves
of those subtrees no refetch was counted and nearly every leaf was costed. B46 counts them in proportion:

* A dim d *clips* when some tile of a completion of the node along d may be partial (rule B44's ``clipping_dims``:
  over Ruby-S tiles only a spatial loop that does not divide what it is dealt makes one); every other dim's tiles are
  whole at every level.
* At a boundary into a level c at or above every spatial loop over a clipping dim (rule B44's boundaries), the loops
  above c over such a dim d are temporal and divide what is left, so c's tiles along d are the ``ceil(N_d / E)``
  intervals ``[k E, (k + 1) E)`` clipped to ``N_d`` (``E`` the product of d's loops at and below c): all non-empty,
  whole but the last, whose share of ``E`` is ``last = N_d - (ceil(N_d / E) - 1) E`` (``N_d`` when ``E > N_d``).
* The model moves into c, at each change of X's tile, the new tile less what it shares with the old one (docs/cost-model.md,
  partial tiles: X's tile is its index set clipped to the operator). When every clipping dim X uses is a plain index
  of X, X's tile is a product over its indices, the clipping dims' factors being those intervals. If a change moves a
  clipping dim's interval, the new tile shares nothing with the old (the intervals are disjoint), clipped or not, and
  the move brings the whole clipped tile; otherwise the clipping dims' intervals stay and the move brings them times
  the change of the other factors, which no clip touches. Either way the move brings the unclipped move's volume times
  the product of the clipping intervals' shares, at least ``prod(last / E)`` over the clipping dims X uses.

So at every one of the ``prod(R)`` positions (counts are translation-invariant along the dims that do not clip) the
fixed nest's refetches of X into c beyond its first tile are at least that share of the unclipped nest's (``part`` and
the unclipped tile: ``entering_perfect`` counts the nest unclipped). With no clipping dim used the share is 1: rule
B44's count, which B46 extends to the inputs that use clipping dims. The output (its
drains and reloads tie to its first touches) and an input whose window spans a clipping dim keep rule I2's count.

Rule B47: the output's tile is a product of plain intervals too, and what enters a level drains from it (the level
starts and ends empty), so the same share bounds its entries and its drains; the parent's updates and the reloads (less
the first touches, a constant) do not decrease with them.

Rule B48: one window axis ``sigma * d + r`` of X (the only index using d and r, r's coefficient 1) over a clipping dim d
at a level whose tile holds all of d: there d has one position, its interval fixed (``[0, N_d)`` clipped, ``[0, E)``
not), and every change of X's tile keeps it. When the axis has no holes (``sigma <= m``, m r's extent in the tile) its
set is an interval of ``sigma (L - 1) + m`` points (L = ``N_d`` clipped, E not), and a shift of r by s brings
``min(|s|, size)`` of them: at least ``size_clipped / size`` of the unclipped count. With holes (``sigma > m``) r must
not move (``m = N_r``), and the axis keeps its ``L m`` points. Both axis sizes and both counts of new points take the
share, and so does the part shared with the old tile of every other axis (plain intervals: all or nothing), so a change
of the product (new points = ``a A - b B`` over this axis' (size, shared) and the others') takes it too:
``a_c A_c - b_c B_c = a_c (A_c - B_c) + (a_c - b_c) B_c``, each term at least the share of the unclipped one. Only one
such axis is taken per operand (the decomposition needs the other factors' shared parts in proportion, which a window's
are not).
"""

from __future__ import annotations

from accelmap.search.imperfect_tiles import ceil_div
from accelmap.search.padded_round_positions import RubySBoundContext
from accelmap.workload.operator import Operand


class PartialRefetchContext(RubySBoundContext):
    """The Ruby-S node bounds (``RubySBoundContext``, rule B44) with rule B46's refetch volumes at partial positions."""

    def __init__(self, op, arch, keep, spatial=None, objective=None):
        super().__init__(op, arch, keep, spatial, objective)
        # Per operand, its plain-index dims that no other index of it uses (the clipping dims B46 takes), and rule B48's
        # windows: dim d -> (d's coefficient, the other dim) for an index ``sigma * d + r`` that is the only one using
        # either dim.
        self.alone: dict[str, frozenset[str]] = {}
        self.windows_of: dict[str, dict[str, tuple[int, str]]] = {}
        for o in op.operands:
            uses: dict[str, int] = {}
            for ix in o.indices:
                for d, _ in ix.terms:
                    uses[d] = uses.get(d, 0) + 1
            self.alone[o.name] = frozenset(d for d in self.plain[o.name] if uses[d] == 1)
            pairs: dict[str, tuple[int, str]] = {}
            for ix in o.indices:
                if len(ix.terms) == 2 and all(uses[d] == 1 for d, _ in ix.terms):
                    (a, ca), (b, cb) = ix.terms
                    if cb == 1:
                        pairs[a] = (ca, b)
                    if ca == 1:
                        pairs[b] = (cb, a)
            self.windows_of[o.name] = pairs

    # Rule B47: the output takes the same share (its drains total what enters it); rule B48: one window axis over a
    # clipping dim takes its share too.
    output_shares = True
    window_shares = True

    def refetch_volume(self, X: Operand, c: int, full: int, prod_r: int, part: float, fi: int, t: int) -> float:
        """Rules B46-B48 (module doc): for an operand whose clipping dims are plain indices (and at most one window
        axis, B48), at a boundary into a level at or above every spatial loop over a clipping dim, the unclipped nest's
        refetches at all ``prod_r`` positions times the least share of a clipped tile; else rules B44 and I2."""
        rest = super().refetch_volume(X, c, full, prod_r, part, fi, t)
        if not self.pinned or (X.is_output and not self.output_shares):
            return rest
        clips, top = self.clipping()
        used = clips & set(X.dims)
        if not used or c > top:
            return rest
        windowed = used - self.alone[X.name]
        if len(windowed) > 1 or (windowed and not self.window_shares):
            return rest
        ext = dict.fromkeys(self.op.dim_names, 1)
        for l in self._node[0]:
            if l.level >= c:
                ext[l.dim] *= l.bound
        share = 1.0
        for d in used - windowed:
            n, e = self.op.sizes[d], ext[d]
            share *= (n - (ceil_div(n, e) - 1) * e) / e
        for d in windowed:
            got = self.window_share(X, d, ext, clips)
            if got is None:
                return rest
            share *= got
        # ``part`` counts the nest unclipped, its first tile too (``t`` is the clipped one).
        return max(rest, prod_r * share * (part - fi * self.tile_of(X, ext)))

    def window_share(self, X: Operand, d: str, ext: dict[str, int], clips: frozenset[str]) -> float | None:
        """Rule B48 (module doc): the least share of a clipped window axis ``sigma * d + r`` of X at a level whose tile
        holds all of d (one position along it), or None where the rule does not apply."""
        got = self.windows_of[X.name].get(d)
        if got is None or got[1] in clips or ext[d] < self.op.sizes[d]:
            return None
        sigma, r = got
        m = ext[r]
        if sigma > m and m < self.op.sizes[r]:
            return None         # holes between the windows, and r's interval moves: the overlap is not in proportion

        def size(n: int) -> int:
            return sigma * (n - 1) + m if sigma <= m else n * m
        return size(self.op.sizes[d]) / size(ext[d])
