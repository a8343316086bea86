"""The analytical counts must equal the brute-force executor's, exactly."""

from hypothesis import given, settings

from accelmap.cost.model import access_counts, evaluate
from accelmap.cost.brute_force_counts import reference_counts

from strategies import mapped_problems


def _tuples(c):
    return {k: v.as_tuple() for k, v in c.items()}


@settings(max_examples=250)
@given(mapped_problems())
def test_analytical_counts_equal_brute_force(problem):
    op, arch, m = problem
    assert _tuples(access_counts(op, arch, m)) == _tuples(reference_counts(op, arch, m))


@settings(max_examples=60)
@given(mapped_problems(imperfect=True))
def test_imperfect_tiles_equal_brute_force(problem):
    op, arch, m = problem
    assert _tuples(access_counts(op, arch, m)) == _tuples(reference_counts(op, arch, m))


@settings(max_examples=60)
@given(mapped_problems())
def test_conservation_laws(problem):
    """Facts that hold for any mapping: every output leaves the top once it is final,
    the compute unit sees every MAC, and wasted slots are never negative."""
    op, arch, m = problem
    c = access_counts(op, arch, m)
    out = op.output.name
    chain = [i for i in range(len(arch.levels)) if out in m.keep[i]]
    # Each level's output fills never exceed what arrives from above.
    for p, ch in zip(chain, chain[1:]):
        assert c[(ch, out)].fills == c[(p, out)].reads
    r = evaluate(op, arch, m)
    assert r.mac_slots >= r.macs
    assert r.latency >= r.compute_cycles
