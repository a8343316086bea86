"""Rules B41-B43 (docs/mapper.md; ``search/open_port_queue.py``, ``open_store_chain.py``, ``open_load_chain.py``): the
terms of several open single-buffered levels together (loads queued on one parent port, the output's stores in
sequence, an input's load after its load into the parent). Each rule's stall must stay below the model's single-buffer
stalls of every mapping below the node, and the node bound below the latency, on presets and random accelerators with
small single-buffered levels; each must raise some bound above rule B27's (so the checks can fail); and the exact
search must keep the exhaustive optimum where the rules cut."""

import random

from accelmap.cost.model import evaluate
from accelmap.search.bounds import BoundContext
from accelmap.search.open_level_refills import open_level_stall
from accelmap.search.open_load_chain import open_load_chain
from accelmap.search.open_port_queue import open_port_queue
from accelmap.search.open_store_chain import open_store_chain
from accelmap.search.spatial import unrolling_of
from strategies import fixed_at_and_above, random_perfect_mappings
from test_bound_network_and_runs import _completions
from test_bound_open_level_refills import _stall, small_single_buffered

RULES = {"B41": open_port_queue, "B42": open_store_chain, "B43": open_load_chain}


def _b27(ctx, level: int) -> float:
    return max((open_level_stall(ctx, c) for c in range(1, level) if c in ctx.serial_fill), default=0.0)


def test_each_rule_never_exceeds_the_stall_of_any_completion():
    """At every level of random perfect mappings, with their own unrolling fixed (as the exact search fixes it), each
    rule's stall is at most the model's single-buffer stalls of the mapping and of random completions of its open
    levels, and the node's latency bound at most their latency; each rule rises above rule B27 somewhere."""
    above_b27 = dict.fromkeys(RULES, 0)
    checked = 0
    mappings = [*random_perfect_mappings(41, 30, [], small_single_buffered),
                *random_perfect_mappings(43, 4, ["eyeriss_like", "simba_like"])]
    for rng, arch, op, m in mappings:
        ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
        for level in range(2, len(arch.levels) + 1):
            fixed, rem = fixed_at_and_above(op, m, level)
            values = {name: rule(ctx, level) for name, rule in RULES.items()}
            b27 = _b27(ctx, level)
            _, lat = ctx.lower_bound(fixed, level, rem)
            for cand in [m, *_completions(rng, op, arch, m, level, 2)]:
                res = evaluate(op, arch, cand, check=False)
                for name, v in values.items():
                    assert v <= _stall(res) * (1 + 1e-9) + 1e-9, (name, arch.name, level, cand)
                assert lat <= res.latency * (1 + 1e-12), (arch.name, level, cand)
                checked += 1
            for name, v in values.items():
                above_b27[name] += v > b27 * (1 + 1e-9)
    assert checked > 120
    assert all(n > 0 for n in above_b27.values()), above_b27



def _rules_off(patch):
    import accelmap.search.open_load_chain as load_chain
    import accelmap.search.open_port_queue as port_queue
    import accelmap.search.open_store_chain as store_chain

    for module, name in ((port_queue, "open_port_queue"), (store_chain, "open_store_chain"),
                         (load_chain, "open_load_chain")):
        patch.setattr(module, name, lambda ctx, level: 0.0)


def test_the_rules_raise_the_root_bound_of_a_1x1_layer_on_eyeriss_like(monkeypatch):
    """ResNet-18 layer2.0.downsample (1x1, stride 2) on eyeriss_like, nothing fixed but the unrolling: the inputs are
    indexed by single dims, so rule B43 adds the global buffer's least input loads from DRAM to the register files'
    least loads of inputs, weights and partial sums (rule B27 took the register files alone: 35,499 cycles)."""
    from accelmap.arch import get_accelerator
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.workload.models import load_model

    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(next(x for x in load_model("resnet18").layers if x.name == "layer2.0.downsample").operator,
                         arch)
    root = ((), len(arch.levels), dict(op.sizes))
    cases = [({"X": {"P": 14}, "Y": {"C": 4, "K": 2}}, (frozenset("IWO"), frozenset("IO"), frozenset("IWO")),
              (93_588, 105_387), 48_043),      # (93,582 before rule B71's queued first loads)
             ({"X": {"C": 2, "P": 7}, "Y": {"K": 4, "Q": 2}}, (frozenset("IWO"), frozenset("I"), frozenset("IWO")),
              (130_617, 143_161), 85_817)]
    for spatial, keep, (before, after), b43 in cases:
        ctx = BoundContext(op, arch, keep, spatial)
        assert round(open_load_chain(ctx, len(arch.levels))) == b43
        assert round(ctx.lower_bound(*root)[1]) == after
        with monkeypatch.context() as patch:
            _rules_off(patch)
            assert round(BoundContext(op, arch, keep, spatial).lower_bound(*root)[1]) == before


def test_exact_search_finds_the_same_optimum_where_the_rules_cut(monkeypatch):
    """Where the rules cut nodes of the exact search (a 3x2x4 GEMM on a small single-buffered accelerator, EDP, found
    by a sweep), the search finds the optimum it finds with them off, proven, with fewer nodes. The exhaustive search
    gave the same optimum, 35,424, over perfect factorizations and over Ruby-S tiles (20 and 54 s of CPU: not in the
    suite; the search without the rules is checked against the exhaustive one in ``tests/test_search.py``)."""
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.search.exact import search_exact
    from accelmap.workload import gemm

    rng = random.Random(1)
    for _ in range(3):
        arch = small_single_buffered(rng)
        shape = rng.choice([(2, 2, 3), (2, 3, 2), (4, 2, 2), (3, 2, 4), (2, 4, 3)])
        objective = rng.choice(["edp", "latency"])
    assert (shape, objective) == ((3, 2, 4), "edp")
    op = adopt_precision(gemm("g", m=3, n=2, k=4), arch)
    got, st = search_exact(op, arch, "edp", heuristic=False)
    with monkeypatch.context() as patch:
        _rules_off(patch)
        ref, st_off = search_exact(op, arch, "edp", heuristic=False)
    assert st.extra["proven"] and st_off.extra["proven"]
    assert got[0].value == ref[0].value == 35424.0
    assert st.nodes < st_off.nodes
