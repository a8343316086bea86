"""The node bound's order-free part is computed once per node (``bounds.NodePart``) and its ordered refetch counts come
from the level's counter: every bound equals the bound computed from scratch, with every count from the whole nest."""

import copy
import itertools
import random

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator
from accelmap.cost.access_counts import NestInfo, entering_perfect
from accelmap.mapping.loopnest import Mapping
from accelmap.search import optimal
from accelmap.search.bounds import BoundContext, NodePart
from accelmap.search.optimal import search_optimal
from accelmap.search.space import Constraints
from accelmap.workload.constructors import gemm
from strategies import random_perfect_mappings

PRESETS = ["eyeriss_like", "tpu_like", "vta_like", "simba_like", "ascend_like", "edge_tpu_like"]


class FromScratch(BoundContext):
    """``BoundContext.lower_bound`` as it was computed before node parts: nothing kept between calls, and the refetch
    counts of an ordered nest from the whole nest (``entering_perfect``)."""

    def node_part(self, fixed, level, rem, full_positions):
        return NodePart()

    def ordered_entering(self, node, fixed, level):
        info = NestInfo(self.op, Mapping(fixed, self.keep))
        return lambda X, c: entering_perfect(info, X, c)


def unrolling_of(arch, m):
    """The mapping's spatial loops as the exact search fixes them (axis -> {dim: bound})."""
    out: dict[str, dict[str, int]] = {a: {} for a in arch.fanout_axes()}
    for l in m.loops:
        if l.spatial:
            out[l.axis][l.dim] = out[l.axis].get(l.dim, 1) * l.bound
    return out


def padded_node_calls(op, arch, m):
    """Per level of a Ruby-S mapping ``m``, the bounds a search asks at the node with the loops at that level and above
    fixed: (fixed loops, level, what is left per dim, the whole positions, keywords) with every order known and with
    the level's orders open."""
    from accelmap.search.imperfect_tiles import ceil_div, dim_products, full_positions

    calls = []
    for level in range(len(arch.levels)):
        fixed = tuple(l for l in m.loops if l.level >= level)
        prod = dim_products(op, fixed)
        rem = {d: ceil_div(op.sizes[d], prod[d]) for d in op.dim_names}
        calls += [(fixed, level, rem, full_positions(op, fixed), kw)
                  for kw in ({}, {"free_orders": frozenset({level})})]
    return calls


def node_calls(m, level, rng):
    """The bounds a search asks at one node of ``m`` (its loops at ``level`` and below fixed): each order of the level's
    temporal loops (at most six) with every order known, over every order (rule B3) and per innermost loop (B4),
    shuffled (so that a node part is made by any of them)."""
    order = tuple(l for l in m.loops if l.level == level and not l.spatial and l.bound > 1)
    rest = tuple(l for l in m.loops if l.level > level or (l.level == level and l.spatial))
    calls = []
    for perm in itertools.islice(itertools.permutations(order), 6):
        calls.append((perm + rest, {}))
        calls.append((perm + rest, {"free_orders": frozenset({level})}))
        calls.extend((perm + rest, {"free_orders": frozenset({level}), "innermost": l}) for l in perm)
    rng.shuffle(calls)
    return calls


def test_node_parts_give_every_bound_a_scratch_computation_gives():
    rng = random.Random(5)
    checked = orders = 0
    for n, (_, arch, op, m) in enumerate(random_perfect_mappings(41, 12, PRESETS)):
        spatial = unrolling_of(arch, m) if n % 2 else None       # every fan-out fixed (rules B17, B29) or none
        objective = "edp" if n % 3 else None
        kept = BoundContext(op, arch, m.keep, spatial, objective)
        for level in range(len(arch.levels)):
            rem = dict(op.sizes)
            for l in m.loops:
                if l.level >= level:
                    rem[l.dim] //= l.bound
            for fixed, kw in node_calls(m, level, rng):
                want = FromScratch(op, arch, m.keep, spatial, objective).lower_bound(fixed, level, dict(rem), **kw)
                assert kept.lower_bound(fixed, level, dict(rem), **kw) == want, (level, fixed, kw)
                checked += 1
                orders += not kw
    assert checked > 100 and orders > 20


def test_a_copied_context_keeps_node_parts_of_its_own():
    """Rule B36 (``root_pairs``) copies a context and leaves its open levels' terms out: the copy's bounds are its own,
    not the original's node parts (they differ on some draws: the test can tell)."""
    differ = 0
    for _, arch, op, m in random_perfect_mappings(53, 4, PRESETS):
        ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m), "edp")
        nlev = len(arch.levels)
        root = ctx.lower_bound((), nlev, dict(op.sizes))
        rest = copy.copy(ctx)
        assert rest._nodes is not ctx._nodes
        rest._open_floor = dict.fromkeys(range(nlev), 0.0)
        rest.open_stall = dict.fromkeys(range(nlev), 0.0)
        scratch = copy.copy(FromScratch(op, arch, m.keep, unrolling_of(arch, m), "edp"))
        scratch._open_floor = dict.fromkeys(range(nlev), 0.0)
        scratch.open_stall = dict.fromkeys(range(nlev), 0.0)
        got = rest.lower_bound((), nlev, dict(op.sizes))
        assert got == scratch.lower_bound((), nlev, dict(op.sizes))
        differ += got != root
    assert differ > 0


def test_search_with_node_parts_visits_the_nodes_a_scratch_bound_visits(monkeypatch):
    """The same nodes, cuts, leaves and best mapping as the search bounding every node from scratch."""
    for name in ("tpu_like", "eyeriss_like"):
        arch = get_accelerator(name)
        op = adopt_precision(gemm(m=2, n=2, k=4), arch)
        got, st = search_optimal(op, arch, "edp", constraints=Constraints())
        with monkeypatch.context() as patch:
            patch.setattr(optimal, "BoundContext", FromScratch)
            want, st0 = search_optimal(op, arch, "edp", constraints=Constraints())
        assert st.nodes > 200      # (eyeriss_like's search: 202 nodes since session 19's merged bounds cut more)
        assert (st.nodes, st.pruned, st.evaluated, st.capacity_cut) == (st0.nodes, st0.pruned, st0.evaluated,
                                                                          st0.capacity_cut)
        assert got[0].value == want[0].value and got[0].mapping == want[0].mapping


def test_a_rule_switched_off_on_a_context_drops_its_node_parts():
    """Rule B10 switched off on a context that has bounded nodes (as tests switch rules): its next bounds are those of
    a context made without the rule (they differ on some draws: the test can tell)."""
    differ = 0
    for _, arch, op, m in random_perfect_mappings(47, 10, PRESETS):
        ctx = BoundContext(op, arch, m.keep)
        nodes = []
        for level in range(len(arch.levels)):
            fixed = tuple(l for l in m.loops if l.level >= level)
            rem = dict(op.sizes)
            for l in fixed:
                rem[l.dim] //= l.bound
            nodes.append((fixed, level, rem))
        before = [ctx.lower_bound(*node) for node in nodes]
        ctx.edge_terms = []
        off = FromScratch(op, arch, m.keep)
        off.edge_terms = []
        after = [ctx.lower_bound(*node) for node in nodes]
        assert after == [off.lower_bound(*node) for node in nodes]
        differ += after != before
    assert differ > 0


def test_node_parts_of_the_ruby_s_contexts_give_every_bound_a_scratch_computation_gives():
    """Rules B44 and B46-B48 (``PartialRefetchContext``) keep each bound's node in attributes set on every call; those
    leave the node parts in place (``per_call_attributes``), and the bounds, asked over the nodes of random padded
    Ruby-S mappings in a shuffled order so that parts are reused across orders and levels, equal a context computing
    each from scratch."""
    from accelmap.search.padded_partial_refetches import PartialRefetchContext
    from test_bound_padded_rounds import _padded_mappings

    class ScratchPartial(PartialRefetchContext):
        def node_part(self, fixed, level, rem, full_positions):
            return NodePart()

        def ordered_entering(self, node, fixed, level):
            info = NestInfo(self.op, Mapping(fixed, self.keep))
            return lambda X, c: entering_perfect(info, X, c)

    rng = random.Random(7)
    checked = reused = 0
    for arch, op, m, spatial in _padded_mappings(40, ("tpu_like", "vta_like", "edge_tpu_like"), seed=5):
        kept = PartialRefetchContext(op, arch, m.keep, spatial)
        calls = padded_node_calls(op, arch, m) * 2
        rng.shuffle(calls)
        for fixed, level, rem, full, kw in calls:
            want = ScratchPartial(op, arch, m.keep, spatial).lower_bound(fixed, level, dict(rem), full_positions=full,
                                                                          **kw)
            before = len(kept._nodes)
            assert kept.lower_bound(fixed, level, dict(rem), full_positions=full, **kw) == want, (level, fixed, kw)
            reused += len(kept._nodes) == before and before > 0
            checked += 1
    assert checked > 60 and reused > 20, (checked, reused)
