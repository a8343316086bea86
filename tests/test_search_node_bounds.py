"""The bound of every tiling of a node at once (``node_bounds``) equals the scalar bound, value for value."""


import numpy as np

from accelmap.mapping.loopnest import Loop
from accelmap.mapping.sampling import divisors
from accelmap.search.bounds import BoundContext
from accelmap.search.node_bounds import open_bounds_rows
from accelmap.search.objective import collector
from accelmap.search.optimal import open_order_bounds, open_order_bounds_batch
from strategies import random_perfect_mappings

PRESETS = ["eyeriss_like", "tpu_like", "vta_like", "simba_like", "diana_like", "edge_tpu_like", "ascend_like"]


def random_nodes(seed: int, draws: int):
    """(ctx, level, inner fixed loops, the level's spatial loops, tilings): a random perfect mapping's loops
    inside ``level`` and its fan-out at ``level``, and random temporal tilings of ``level`` over what is left
    (each (t_loops, rem below)); the context with the fan-outs fixed to the mapping's or free."""
    for rng, arch, op, m in random_perfect_mappings(seed, draws, PRESETS):
        nlev = len(arch.levels)
        if nlev < 3:
            continue
        level = rng.randrange(1, nlev - 1)
        inner = tuple(l for l in m.loops if l.level > level)
        s_loops = tuple(l for l in m.loops if l.level == level and l.spatial)
        left = dict(op.sizes)
        for l in inner + s_loops:
            left[l.dim] //= l.bound
        tilings = []
        for _ in range(rng.randint(1, 12)):
            t = {d: rng.choice(divisors(r)) for d, r in left.items()}
            t_loops = tuple(Loop(d, b, level) for d, b in t.items() if b > 1)
            tilings.append((t_loops, {d: left[d] // t[d] for d in left}))
        spatial: dict[str, dict[str, int]] = {name: {} for name in arch.fanout_axes()}
        for l in m.loops:
            if l.spatial and l.bound > 1:
                spatial[l.axis][l.dim] = spatial[l.axis].get(l.dim, 1) * l.bound
        ctx = BoundContext(op, arch, m.keep, spatial if rng.random() < 0.5 else None)
        yield ctx, level, inner, s_loops, tilings


def test_rows_equal_the_scalar_bound_on_random_nodes():
    checked = 0
    for ctx, level, inner, s_loops, tilings in random_nodes(5, 160):
        dims = ctx.op.dim_names
        T = np.array([[next((l.bound for l in t if l.dim == d), 1) for d in dims] for t, _ in tilings])
        rem = np.array([[r[d] for d in dims] for _, r in tilings])
        shared = s_loops + inner
        cases = [({level: T}, level, rem, [dict(r) for _, r in tilings])]
        if level == 1:
            # The look-ahead of the exact search: the outermost level's loops forced, both orders open.
            cases.append(({1: T, 0: rem}, 0, np.ones_like(rem), [dict.fromkeys(dims, 1)] * len(tilings)))
        for free, low, left, rems in cases:
            for innermost in (None, *dims):
                got = open_bounds_rows(ctx, shared, free, low, left, innermost)
                assert got is not None
                for r, (t_loops, _) in enumerate(tilings):
                    fixed = t_loops + shared
                    if low == 0:
                        fixed = tuple(Loop(d, int(b), 0) for d, b in zip(dims, free[0][r], strict=True) if b > 1) \
                            + fixed
                    loop = next((l for l in t_loops if l.dim == innermost), None)
                    if innermost is not None and loop is None:
                        continue
                    want = ctx.lower_bound(fixed, low, rems[r], free_orders=frozenset(free), innermost=loop)
                    assert (float(got[0][r]), float(got[1][r])) == want, (ctx.op, ctx.arch.name, level, t_loops)
                    checked += 1
    assert checked > 1000


def test_batch_equals_the_scalar_open_order_bounds(monkeypatch):
    """What the branch and bound sees: per tiling, the same bounds (B3 alone when it prunes, else one per
    loop that may be innermost, B4), whether the incumbent prunes much or nothing."""
    checked = 0
    for ctx, level, inner, s_loops, tilings in random_nodes(11, 120):
        monkeypatch.setattr("accelmap.search.optimal.BATCH_ROWS", 1)
        rows = [(t, s_loops, r) for t, r in tilings]
        for best in (collector("edp", 1), _pruning_at_median(ctx, inner, level, rows)):
            batch = open_order_bounds_batch(ctx, inner, level, rows, best)
            for (t_loops, _, rem), got in zip(rows, batch, strict=True):
                if len(t_loops) < 2:
                    assert got is None
                    continue
                want = open_order_bounds(ctx, t_loops + s_loops + inner, level, rem, frozenset({level}), best)
                assert got == want
                checked += 1
    assert checked > 300


def _pruning_at_median(ctx, inner, level, rows):
    """A collector whose best is the median EDP bound of the rows: it prunes some and not others."""

    class Fixed:
        def __init__(self, value):
            self.value = value

        def prunes(self, e, l):
            return e * l >= self.value

    vals = sorted(e * l for t, s, r in rows
                  for e, l in [ctx.lower_bound(t + s + inner, level, r, free_orders=frozenset({level}))])
    return Fixed(vals[len(vals) // 2])
