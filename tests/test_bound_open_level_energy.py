"""Rule B35 (docs/mapper.md, ``search/open_level_energy.py``): an open level's least refill energy takes rule B15's
orders of the loops above it, as rule B27's stall does. The node bound's energy must stay below the energy of the
mapping and of random completions of its open levels at every level (presets and random single-buffered
accelerators, the unrolling known, where the orders apply), and the rule must raise eyeriss_like's root energy bound
over rule B8's."""

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.search.bounds import BoundContext
from accelmap.search.open_level_energy import least_refill_energy
from accelmap.search.spatial import unrolling_of
from strategies import fixed_at_and_above, random_perfect_mappings
from test_bound_network_and_runs import _completions
from test_bound_open_level_refills import small_single_buffered


def test_the_node_energy_bound_never_exceeds_any_completion():
    """At every level, with the unrolling known (the orders need every fan-out above the open level fixed), the node's
    energy bound is at most the energy of the mapping and of random completions of its open levels."""
    checked = fired = 0
    mappings = [*random_perfect_mappings(7, 12, [], small_single_buffered),
                *random_perfect_mappings(41, 3, ["eyeriss_like", "simba_like"])]
    for rng, arch, op, m in mappings:
        ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
        for level in range(len(arch.levels) + 1):
            fixed, rem = fixed_at_and_above(op, m, level)
            energy, _ = ctx.lower_bound(fixed, level, rem)
            fired += any(least_refill_energy(ctx, c) > 0 for c in range(1, level))
            for cand in [m, *_completions(rng, op, arch, m, level, 1)]:
                res = evaluate(op, arch, cand, check=False)
                assert energy <= res.energy_total * (1 + 1e-12), (arch.name, level, cand)
                checked += 1
    assert checked > 40 and fired >= 2, (checked, fired)


def test_the_orders_raise_the_root_energy_bound_on_eyeriss_like(monkeypatch):
    """ResNet-18 layer1.0.conv1 on eyeriss_like with P on the array's columns and P, R on its rows, every level keeping
    every operand it may: each weight enters every one of the 56 register files along P whatever the order of the loops
    above them, which rule B8's footprint floor did not count: 747,806,464 pJ at the root with B8 (the code before this
    rule), 753,889,024 with B35 (rule B37 off), 773,627,392 with B37 as well."""
    from accelmap.search import open_level_energy, open_level_refills
    from accelmap.workload.models import load_model

    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(next(x for x in load_model("resnet18").layers if x.name == "layer1.0.conv1").operator, arch)
    keep = (frozenset("IWO"), frozenset("IO"), frozenset("IWO"))
    spatial = {"X": {"P": 14}, "Y": {"P": 4, "R": 3}}
    root = ((), len(arch.levels), dict(op.sizes))
    with monkeypatch.context() as patch:
        patch.setattr(open_level_refills, "window_shares", lambda *a: {})
        # (the caches are keyed by what the rules read, not by whether B37 is on: fresh ones while it is off)
        patch.setattr(open_level_refills, "_OPEN_STALLS", {})
        patch.setattr(open_level_energy, "_OPEN_FLOORS", {})
        energy, _ = BoundContext(op, arch, keep, spatial).lower_bound(*root)
    assert round(energy) == 753_889_024
    assert round(BoundContext(op, arch, keep, spatial).lower_bound(*root)[0]) == 773_627_392
