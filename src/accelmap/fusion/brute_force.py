"""The brute-force twin of ``fusion.geometry``: walk every fused tile of a small group point by point.

It shares no interval arithmetic with the closed forms: at each tile it builds the set of output
positions of the tile, then, stage by stage backwards, the set of input positions every computed
position reads (position by position), and takes away what the tensor's halo policy makes
available from earlier tiles: everything computed before (fully cached), what was computed earlier
in the same tile row (H-cached-V-recompute), or nothing (fully recompute). What is left is computed
(or, for the group's input, fetched from off-chip memory). It also finds the elements that must be
on chip at once: those a tile reads, plus those computed at or before it that a later tile takes
from the cache, counted from the last tile that computed them.

A residual join (``join``) reads its skip tensor at the tile's output positions: kept, the tile
needs of that tensor the bounding rectangle of what its window needs and those positions (what is
not available is computed, or fetched); re-read, they are fetched from off-chip memory and staged
for the tile. A join inside the group (``inner_joins``, spanning two residual blocks) does the same
at the positions of its tensor that the tile computes.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelmap.fusion.geometry import Join, Stage

Point = tuple[int, int, int]      # (row, column, head); head 0 where a tensor is not split into heads


@dataclass(frozen=True)
class WalkedCounts:
    tiles: int
    macs: tuple[int, ...]
    input_fetched: int
    output_written: int
    live_bits: tuple[int, ...]     # per tensor: most bits on chip at one tile (at one step of it, with head tiles)
    # per stage: how often each (rows, columns) of computed block occurs (a tile computing nothing: none); with a
    # head tile, a head-split stage's blocks per head tile
    blocks: tuple[dict[tuple[int, int], int], ...]
    skip_fetched: int = 0          # elements of a join's skip tensor read from off-chip memory
    skip_live_bits: int = 0        # the most of them staged at one tile
    # a kept skip at a tile needing nothing else of its tensor, or for an add computing nothing there
    skip_window_empty: bool = False


def _reads(stage: Stage, p: Point, in_heads: int) -> set[Point]:
    """The input positions output position ``p`` reads: its window, of its own head where the stage is split into
    heads, of every head of a split input otherwise (a product over all heads: the output projection)."""
    r, c, h = p
    rows = [stage.rows.stride * r - stage.rows.pad + k for k in range(stage.rows.span)]
    cols = [stage.cols.stride * c - stage.cols.pad + k for k in range(stage.cols.span)]
    heads = [h] if stage.heads > 1 and in_heads > 1 else range(in_heads)
    return {(a, b, g) for a in rows if 0 <= a < stage.in_rows for b in cols if 0 <= b < stage.in_cols for g in heads}


def walk(stages: tuple[Stage, ...], tile_rows: int, tile_cols: int, policies: tuple[str, ...],
         join: Join | None = None, skip_policy: str = "re-read",
         inner_joins: tuple[tuple[Join, str], ...] = (), head_tile: int | None = None) -> WalkedCounts:
    """``head_tile``: attention tiled over heads. Every tensor the head-split stages read or write is walked per
    head (a position per head); each tile runs in steps: the stages before the split ones (step 0), the split
    ones per head tile g (step 1 + g), the stages after (the last step). An element is on chip from the step that
    computes it (the tile's start for the group's input, or for an element taken from the cache) to the step
    that reads it (the last step for the group's output, or for one kept for a later tile)."""
    n = len(stages)
    split = [j for j, s in enumerate(stages) if s.heads > 1] if head_tile is not None else []
    heads = stages[split[0]].heads if split else 1
    a, b = (split[0], split[-1]) if split else (n, -1)
    tensor_heads = [heads if a <= j <= b + 1 else 1 for j in range(n + 1)]
    n_head_tiles = heads // head_tile if split and head_tile else 1
    last_step = (n_head_tiles + 1 if b < n - 1 else n_head_tiles) if split else 0

    def step(j: int, h: int) -> int:
        """The step of a tile at which stage ``j`` computes head ``h`` of its output."""
        if not split or j < a:
            return 0
        return 1 + h // (head_tile or 1) if j <= b else n_head_tiles + 1

    joins = tuple(inner_joins) + (((join, skip_policy),) if join is not None else ())
    targets = [n if jn.at is None else jn.at for jn, _ in joins]
    depth = [stages[0].in_depth] + [s.out_depth for s in stages]
    skip_fetched = skip_live = 0
    empty = False
    last = stages[-1]
    tiles = [(ty, tx) for ty in range(-(-last.out_rows // tile_rows)) for tx in range(-(-last.out_cols // tile_cols))]
    computed_at: list[list[set[Point]]] = []     # [tile][tensor]
    needed_at: list[list[set[Point]]] = []
    done: list[set[Point]] = [set() for _ in range(n + 1)]          # computed at any earlier tile
    done_row: list[set[Point]] = [set() for _ in range(n + 1)]      # ... in the current tile row
    row_now = -1
    for ty, tx in tiles:
        if ty != row_now:
            row_now = ty
            done_row = [set() for _ in range(n + 1)]
        out = {(r, c, h) for r in range(ty * tile_rows, min(last.out_rows, (ty + 1) * tile_rows))
               for c in range(tx * tile_cols, min(last.out_cols, (tx + 1) * tile_cols)) for h in range(tensor_heads[n])}
        need: list[set[Point]] = [set() for _ in range(n + 1)]
        comp: list[set[Point]] = [set() for _ in range(n + 1)]
        need[n] = comp[n] = out
        for j in range(n - 1, -1, -1):
            for p in comp[j + 1]:
                need[j] |= _reads(stages[j], p, tensor_heads[j])
            for (jn, sp), k in zip(joins, targets, strict=True):
                if sp != "kept" or jn.skip != j:
                    continue
                # The add reads the skip where the tile computes its tensor; the skip's buffer holds the
                # rectangle around those positions and its window.
                if not need[j] or not comp[k]:
                    empty = True
                    continue
                both = need[j] | comp[k]
                rs, cs = [p[0] for p in both], [p[1] for p in both]
                need[j] = {(r, c, 0) for r in range(min(rs), max(rs) + 1) for c in range(min(cs), max(cs) + 1)}
            policy = policies[j]
            have = done[j] if policy == "fully-cached" else done_row[j] if policy == "H-cached-V-recompute" else set()
            comp[j] = need[j] - have
            if 0 < j and stages[j - 1].heads <= 1 < tensor_heads[j]:
                # A stage not split into heads computes every head of a position at once.
                comp[j] = {(r, c, h) for r, c, _ in comp[j] for h in range(tensor_heads[j])}
        for j in range(n + 1):
            done[j] |= comp[j]
            done_row[j] |= comp[j]
        computed_at.append(comp)
        needed_at.append(need)
        staged = 0
        for (jn, sp), k in zip(joins, targets, strict=True):
            if sp != "kept":
                skip_fetched += len(comp[k]) * depth[k]
                staged += len(comp[k]) * depth[k] * jn.bits
        skip_live = max(skip_live, staged)
    macs = tuple(s.macs_per_pixel * sum(len(c[j + 1]) for c in computed_at) // tensor_heads[j + 1]
                 for j, s in enumerate(stages))
    fetched = sum(len(c[0]) for c in computed_at) // tensor_heads[0] * stages[0].in_depth
    bits = [stages[0].in_bits] + [s.out_bits for s in stages]
    live = []
    for j in range(n + 1):
        # An element a tile takes from the cache is on chip from its last computation before then.
        carry: list[set[Point]] = [set() for _ in tiles]
        for u in range(len(tiles)):
            for p in needed_at[u][j] - computed_at[u][j]:
                s = max(s for s in range(u) if p in computed_at[s][j])
                for t in range(s, u):
                    carry[t].add(p)
        most = 0
        for t in range(len(tiles)):
            counts = [0] * (last_step + 1)
            for p in needed_at[t][j] | carry[t]:
                lo = (0 if j == 0 else step(j - 1, p[2])) if p in computed_at[t][j] else 0
                hi = last_step if p in carry[t] or j == n else step(j, p[2])
                for st in range(lo, hi + 1):
                    counts[st] += 1
            most = max(most, max(counts))
        live.append(most * (depth[j] // tensor_heads[j]) * bits[j])
    blocks = []
    for j in range(1, n + 1 if not empty else 1):     # the model refuses that case
        seen: dict[tuple[int, int], int] = {}
        per_block = (head_tile or 1) if split and a <= j - 1 <= b else tensor_heads[j]
        for comp in computed_at:
            for g in range(n_head_tiles if per_block != tensor_heads[j] else 1):
                pts = {p for p in comp[j] if per_block == tensor_heads[j] or p[2] // per_block == g}
                if pts:
                    shape = (len({p[0] for p in pts}), len({p[1] for p in pts}))
                    assert shape[0] * shape[1] * per_block == len(pts), "a block of rows x columns x heads"
                    seen[shape] = seen.get(shape, 0) + 1
        blocks.append(seen)
    return WalkedCounts(len(tiles), macs, fetched, last.out_rows * last.out_cols * last.out_depth, tuple(live),
                        tuple(blocks), skip_fetched, skip_live, empty)
