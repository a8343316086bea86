"""Rules B10 and B11 (docs/mapper.md): the prologue and epilogue of levels that overlap transfers with compute,
and the MACs' streaming through the last levels' ports, as terms of the latency bound, never exceed what the model
charges, on random mappings of every preset."""

import random

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping
from accelmap.search.bounds import BoundContext
from accelmap.search.imperfect_tiles import ImperfectBoundContext, full_positions
from accelmap.workload.index_sets import tile_size
from strategies import random_operator

ALL_PRESETS = ["eyeriss_like", "simba_like", "tpu_like", "edge_tpu_like", "ascend_like", "vta_like", "vta_8x8x8",
               "diana_like", "aie_like"]


def _mappings(arch_name: str, seed: int, draws: int, imperfect: bool = False):
    rng = random.Random(seed)
    arch = get_accelerator(arch_name)
    for _ in range(draws):
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30, imperfect=imperfect)
        except MappingError:
            continue
        yield arch, op, m


def _fixed_tiles(op, m, level):
    """``tile_at`` of a node with the mapping's levels >= ``level`` fixed (what the bound sees)."""
    def tile_at(X, c):
        ext = dict.fromkeys(op.sizes, 1)
        for l in m.loops:
            if l.level >= max(c, level):
                ext[l.dim] *= l.bound
        return tile_size(X, {d: min(e, op.sizes[d]) for d, e in ext.items()})
    return tile_at


@pytest.mark.parametrize("arch_name", ALL_PRESETS)
def test_prologue_and_epilogue_bound_never_exceeds_the_models(arch_name):
    """B10's term alone against the model's "prologue and epilogue" part, and the whole latency bound against
    the latency, at every level of random perfect (and, with partial tiles, imperfect) mappings."""
    checked = positive = 0
    for imperfect in (False, True):
        for arch, op, m in _mappings(arch_name, 17, 25, imperfect):
            res = evaluate(op, arch, m)
            edge = dict(res.latency_parts)["prologue and epilogue"]
            ctx = (ImperfectBoundContext if imperfect else BoundContext)(op, arch, m.keep)
            # The whole mapping fixed (partial tiles counted at whole positions only, rule I2, as the search
            # does): B11's streaming plus B10 below the latency.
            whole = full_positions(op, m.loops) if imperfect else None
            assert ctx.lower_bound(m.loops, 0, dict.fromkeys(op.sizes, 1), full_positions=whole)[1] \
                <= res.latency * (1 + 1e-12)
            for level in range(len(arch.levels) + 1):
                term = float(ctx.edge_cycles(_fixed_tiles(op, m, level), level)[0])
                assert term <= edge * (1 + 1e-12) + 1e-9, (level, m, term, edge)
                positive += level == 0 and term > 0
                if not imperfect:
                    fixed = tuple(l for l in m.loops if l.level >= level)
                    rem = dict(op.sizes)
                    for l in fixed:
                        rem[l.dim] //= l.bound
                    assert ctx.lower_bound(fixed, level, rem)[1] <= res.latency * (1 + 1e-12), (level, m)
            checked += 1
    assert checked >= 20
    if any(lv.refills_during_compute for lv in get_accelerator(arch_name).levels[1:]):
        assert positive >= 5


def test_prologue_raises_the_bound_on_a_double_buffered_buffer():
    """On tpu_like the unified buffer is double-buffered: with the whole mapping fixed, B10 adds the first tiles'
    load from DRAM and the last output tile's drain to the MAC schedule."""
    raised = 0
    for arch, op, m in _mappings("tpu_like", 2, 30):
        ctx = BoundContext(op, arch, m.keep)
        with_edge = ctx.lower_bound(m.loops, 0, dict.fromkeys(op.sizes, 1))[1]
        ctx.edge_terms = []
        without = ctx.lower_bound(m.loops, 0, dict.fromkeys(op.sizes, 1))[1]
        raised += with_edge > without
    assert raised >= 10


def test_latency_bound_is_often_exact_at_a_leaf():
    """At a leaf (every loop fixed) of tpu_like whose latency is the MAC schedule (or the streaming through the
    unified buffer's port), single-buffer stalls and the prologue/epilogue, rules B9-B11 give it exactly on many
    mappings: before B10 the prologue and epilogue were missing from every such bound."""
    exact = eligible = 0
    for arch, op, m in _mappings("tpu_like", 5, 40):
        res = evaluate(op, arch, m)
        parts = dict(res.latency_parts)
        if parts["double-buffered transfers not hidden"] > 0 or parts["busiest memory port beyond that"] > 0:
            continue
        eligible += 1
        got = BoundContext(op, arch, m.keep).lower_bound(m.loops, 0, dict.fromkeys(op.sizes, 1))[1]
        exact += abs(got - res.latency) <= 1e-9 * res.latency
    assert eligible >= 20 and exact >= eligible // 2, (exact, eligible)
