"""Rule B67 (docs/mapper.md): at a node of the branch and bound, the tile changes of its fixed loops stall compute as
the model times them; below the outermost level (only it open) the first fill, the last drains and every order of the
outermost loops too. The rule's latency stays below the model's at every level of random perfect mappings of every
preset, it is the model's latency on a mapping whose stall is all single-buffer waits, and the exact search with it
keeps the exhaustive optimum."""

import itertools
import random

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.schema import accelerator_from_dict
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping
from accelmap.search import fixed_transitions, search_exhaustive
from accelmap.search.fixed_transitions import applies, fixed_classes_latency
from accelmap.search.optimal import search_optimal
from accelmap.workload import parse_expression
from strategies import random_operator
from test_bound_first_fill import _node  # the node a mapping fixes at a level, sizes left rounded up
from test_bound_padded_rounds import buffer_over_four

ALL_PRESETS = ["eyeriss_like", "simba_like", "tpu_like", "edge_tpu_like", "ascend_like", "vta_like", "vta_8x8x8",
               "diana_like", "aie_like"]


@pytest.mark.parametrize("arch_name", ALL_PRESETS)
def test_fixed_classes_latency_never_exceeds_the_models(arch_name):
    """At every level of random perfect mappings the rule's latency is at most the model's (the completion it reads
    is not the mapping: its open loops sit at the outermost level), and on some nodes it is above half of it."""
    rng = random.Random(67)
    arch = get_accelerator(arch_name)
    fired = close = 0
    for _ in range(40):
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30)
        except MappingError:
            continue
        latency = evaluate(op, arch, m).latency
        for level in range(1, len(arch.levels)):
            fixed, rem = _node(op, m, level)
            got = fixed_classes_latency(op, arch, m.keep, level, fixed, rem)
            assert got <= latency * (1 + 1e-12), (level, got, latency, m)
            if got:
                fired += 1
                close += got > 0.5 * latency
    assert fired and close


def test_the_rule_applies_only_where_its_argument_holds():
    """Open levels with a fan-out, and imperfect nests, are left out (0)."""
    arch = get_accelerator("edge_tpu_like")
    op = adopt_precision(parse_expression("O[m,n] += I[m,k] * W[k,n]", {"m": 4, "n": 4, "k": 4}, name="g"), arch)
    assert not applies(arch, 3, (), op.sizes, dict(op.sizes))          # WMem (level 2) has a fan-out and is open
    assert applies(arch, 2, (), op.sizes, dict(op.sizes))
    from accelmap.mapping.loopnest import Loop
    assert not applies(arch, 2, (Loop("m", 3, 2),), op.sizes, {"m": 2, "n": 4, "k": 4})   # 3 x 2 is not 4
    assert fixed_classes_latency(op, arch, (frozenset("IWO"),) * 5, 0, (), dict(op.sizes)) == 0.0


def test_below_the_outermost_level_the_bound_is_the_least_latency_over_its_orders(monkeypatch):
    """On a single-buffered buffer over the MACs (no other latency term: MAC schedule plus single-buffer stalls), the
    rule at level 1 with every order run (``OUTER_ORDERS_DIMS`` 3) is the least latency over the outermost level's
    orders, read from the model on each; with one run (the default for three dims left) it is at most that."""
    arch = buffer_over_four("32 B", "16 bit/cycle")
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", {"k": 4, "p": 4, "r": 2}, name="conv1d"), arch)
    from accelmap.mapping.loopnest import Loop, Mapping
    keep = (frozenset("IWO"), frozenset("IWO"))
    inner = (Loop("p", 2, 1), Loop("k", 2, 1, "X"))
    rem = {"k": 2, "p": 2, "r": 2}
    latencies = []
    for outer in itertools.permutations((Loop("r", 2, 0), Loop("k", 2, 0), Loop("p", 2, 0))):
        res = evaluate(op, arch, Mapping(outer + inner, keep))
        parts = dict(res.latency_parts)
        assert res.latency == parts["MAC schedule"] + parts["single-buffer stalls"]
        latencies.append(res.latency)
    assert sorted(set(latencies)) == [56.0, 114.0]
    one_run = fixed_classes_latency(op, arch, keep, 1, inner, rem)
    assert 0 < one_run <= min(latencies)
    monkeypatch.setattr(fixed_transitions, "OUTER_ORDERS_DIMS", 3)
    assert fixed_classes_latency(op, arch, keep, 1, inner, rem) == min(latencies)


def buffer_over_register():
    """DRAM over a single-buffered 32 B buffer whose 2-wide fan-out feeds a 2 B weight register per MAC: three levels,
    so the children of level 1 (the register and the buffer fixed, DRAM open) are not leaves."""
    return accelerator_from_dict({"name": "buf3", "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "16 bit",
         "read_energy": "50 pJ", "write_energy": "50 pJ", "read_bandwidth": "8 bit/cycle",
         "write_bandwidth": "8 bit/cycle"},
        {"name": "Buf", "holds": ["I", "W", "O"], "capacity": "32 B", "width": "16 bit", "read_energy": "2 pJ",
         "write_energy": "2 pJ", "read_bandwidth": "16 bit/cycle", "write_bandwidth": "16 bit/cycle",
         "fanout": {"axes": [{"name": "X", "size": 2, "multicast": True, "reduce": True}], "transfer_energy": "1 pJ"}},
        {"name": "Reg", "holds": ["W"], "capacity": "2 B", "width": "8 bit", "read_energy": "0.1 pJ",
         "write_energy": "0.1 pJ"}],
        "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 16}}})


def test_exact_search_with_the_rule_keeps_the_exhaustive_optimum(monkeypatch):
    """A 1-D convolution (K = 2, P = 4, R = 3) on ``buffer_over_register``, latency (found by a sweep of 32 small
    cases, the rule cut nodes in 16): the branch and bound cuts 13 nodes by the rule, visits 1,241 nodes against 1,254
    without it, and both find the exhaustive optimum, 43 cycles."""
    arch = buffer_over_register()
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", {"k": 2, "p": 4, "r": 3}, name="conv1d"), arch)
    want, _ = search_exhaustive(op, arch, "latency")
    got, st = search_optimal(op, arch, "latency")
    with monkeypatch.context() as patch:
        patch.setattr(fixed_transitions, "fixed_classes_latency", lambda *a: 0.0)
        off, st_off = search_optimal(op, arch, "latency")
    assert want[0].value == got[0].value == off[0].value == 43
    assert st.extra["fixed_classes_cut"] == 13 and "fixed_classes_cut" not in st_off.extra
    assert (st.nodes, st_off.nodes) == (1241, 1254)
