"""The analytical counts must equal the brute-force executor's, exactly, and obey conservation laws."""

import math

from hypothesis import given, settings

from accelmap.cost.brute_force_counts import reference_counts
from accelmap.cost.model import access_counts, evaluate
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


def _spatial_product(arch, m, lo: int, hi: int, keep) -> int:
    """Product of the spatial loops between levels lo and hi (inside lo's tiles, above hi's: the fan-outs
    at levels lo..hi-1, less the axes hi is shared along, plus those lo is) that ``keep`` selects."""
    return math.prod(l.bound for l in m.loops if l.spatial and arch.inside(lo, l.level, l.axis)
                     and not arch.inside(hi, l.level, l.axis) and keep(l))


def _check_conservation(op, arch, m, c, perfect: bool) -> None:
    nlev = len(arch.levels)

    def multicast(X):
        # One parent read feeds every instance of a multicast group: dims that do not index X, on axes that multicast.
        return lambda l: arch.levels[l.level].fanout.axis(l.axis).multicast and l.dim not in X.dims

    def reduced(l):
        return l.dim not in op.output.dims

    for X in op.operands:
        chain = [i for i in range(nlev) if X.name in m.keep[i]]
        assert c[(chain[0], X.name)].fills == 0 and chain[0] == 0        # nothing above the top level
        if X.is_output:
            # Outputs: what a child level drains is what its parent takes as updates times the spatial
            # reduction between them; at the innermost level every MAC's result arrives once per
            # reduction group (partial last tiles included: a reduction is complete).
            for p, ch in zip(chain, chain[1:]):
                assert c[(ch, X.name)].drains == c[(p, X.name)].updates * _spatial_product(arch, m, p, ch, reduced)
            last = chain[-1]
            assert c[(last, X.name)].updates * _spatial_product(arch, m, last, nlev, reduced) == op.macs
            # The top level takes every output element's final value once, plus one update per partial
            # sum it later sends back down (a reload); an initial value read is not a reload.
            top = c[(0, X.name)]
            initial = op.footprint(X) if op.init_output == "read" else 0
            assert top.updates == op.footprint(X) + top.reads - initial
        else:
            assert c[(0, X.name)].drains == 0 and c[(0, X.name)].updates == 0
            if perfect:
                # Inputs: every element a level reads for its child fills each member of a multicast group;
                # at the innermost level one read per MAC per multicast group.
                for p, ch in zip(chain, chain[1:]):
                    assert c[(ch, X.name)].fills == c[(p, X.name)].reads * _spatial_product(arch, m, p, ch, multicast(X))
                last = chain[-1]
                assert c[(last, X.name)].reads * _spatial_product(arch, m, last, nlev, multicast(X)) == op.macs


@settings(max_examples=120)
@given(mapped_problems(imperfect=False))
def test_conservation_laws(problem):
    """Laws that relate the counts of different levels through the multicast and reduction between them,
    on perfectly factored mappings. The analytical model builds some of them in (a parent's reads are its
    child's fills over the multicast), so they are checked on the brute-force executor's counts, which
    watch every buffer's resident set and share no code with it; the analytical counts must obey them too."""
    op, arch, m = problem
    _check_conservation(op, arch, m, reference_counts(op, arch, m), perfect=True)
    _check_conservation(op, arch, m, access_counts(op, arch, m), perfect=True)
    r = evaluate(op, arch, m)
    assert r.mac_slots == r.macs


@settings(max_examples=60)
@given(mapped_problems(imperfect=True))
def test_output_conservation_with_partial_tiles(problem):
    """The output laws hold with partial last tiles too (inputs then fetch clipped tiles, so theirs do not)."""
    op, arch, m = problem
    _check_conservation(op, arch, m, reference_counts(op, arch, m), perfect=False)
    _check_conservation(op, arch, m, access_counts(op, arch, m), perfect=False)
