"""Worked examples of seed 001 (Sunstone): Table 2.1 access counts and Fig. 4.3 footprints."""

import pytest

from accelmap.arch import accelerator_from_dict
from accelmap.cost.brute_force_counts import reference_counts
from accelmap.cost.model import access_counts
from accelmap.mapping import Loop, Mapping
from accelmap.mapping.validate import capacity_usage
from accelmap.workload import parse_expression


def _toy_arch(l1_words="64 words"):
    return accelerator_from_dict({
        "name": "sunstone_toy", "compute": {"mac_energy": "1 pJ", "precision": {"I": 16, "W": 16, "O": 16}},
        "levels": [
            {"name": "L2", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "16 bit",
             "fanout": {"axes": [{"name": "X", "size": 2}]}},
            {"name": "L1", "holds": ["I", "W", "O"], "capacity": l1_words, "width": "16 bit"}]})


def _conv1d(init="read"):
    # Sunstone's worked example reads the ofmap before accumulating into it.
    return parse_expression("O[k,p] += I[p+r] * W[k,r]", dict(k=4, p=4, r=3),
                            bits=dict(O=16, I=16, W=16), init_output=init)


def test_table_2_1_tiled():
    arch, op = _toy_arch(), _conv1d()
    m = Mapping((Loop("k", 2, 0), Loop("p", 2, 0, "X"), Loop("k", 2, 1), Loop("p", 2, 1), Loop("r", 3, 1)),
                (frozenset("OIW"), frozenset("OIW")))
    c = access_counts(op, arch, m)
    # L2 reads: ifmap 8 (the halo between the two PEs is read twice), weight 12, ofmap 16.
    assert (c[(0, "I")].reads, c[(0, "W")].reads, c[(0, "O")].reads) == (8, 12, 16)
    # L1 fills: ifmap 8, weight 24 (multicast: one read, two fills), ofmap 16.
    assert (c[(1, "I")].fills, c[(1, "W")].fills, c[(1, "O")].fills) == (8, 24, 16)
    # Write-backs L1 -> L2: 16.
    assert c[(1, "O")].drains == 16 and c[(0, "O")].updates == 16
    assert {k: v.as_tuple() for k, v in c.items()} == {k: v.as_tuple() for k, v in reference_counts(op, arch, m).items()}


def test_table_2_1_untiled():
    # Untiled: every MAC fetches each operand from L2 (L1 bypassed).
    arch, op = _toy_arch(), _conv1d()
    m = Mapping((Loop("k", 4, 0), Loop("p", 4, 0), Loop("r", 3, 0)), (frozenset("OIW"), frozenset()))
    c = access_counts(op, arch, m)
    assert (c[(0, "I")].reads, c[(0, "W")].reads, c[(0, "O")].reads) == (48, 48, 48)
    assert c[(0, "O")].updates == 48


def test_table_2_1_zero_initialized_output_saves_first_reads():
    arch, op = _toy_arch(), _conv1d("zero")
    m = Mapping((Loop("k", 4, 0), Loop("p", 4, 0), Loop("r", 3, 0)), (frozenset("OIW"), frozenset()))
    c = access_counts(op, arch, m)
    assert c[(0, "O")].reads == 48 - 16  # each of the 16 outputs is first written without a read


@pytest.mark.parametrize("tile,footprint", [
    ((1, 1, 1, 1), 3), ((2, 1, 1, 1), 5), ((1, 1, 1, 3), 7), ((2, 1, 1, 3), 11),
    ((2, 7, 1, 1), 23), ((2, 1, 2, 3), 20), ((2, 2, 1, 1), 8), ((2, 1, 2, 1), 8), ((1, 2, 2, 1), 8),
])
def test_fig_4_3_footprints(tile, footprint):
    """Fig. 4.3: P=14, K=4, C=4, R=3; node (K, P, C, R) has footprint (P+R-1)C + KCR + PK."""
    op = parse_expression("O[k,p] += I[c,p+r] * W[c,k,r]", dict(k=4, p=14, c=4, r=3),
                          bits=dict(O=16, I=16, W=16))
    k, p, c, r = tile
    loops = [Loop(d, b, 0) for d, b in (("k", 4 // k), ("p", 14 // p), ("c", 4 // c), ("r", 3 // r)) if b > 1]
    loops += [Loop(d, b, 1) for d, b in (("k", k), ("p", p), ("c", c), ("r", r)) if b > 1]
    m = Mapping(tuple(loops), (frozenset("OIW"), frozenset("OIW")))
    use = capacity_usage(op, _toy_arch(), m)[1]
    assert sum(use.values()) // 16 == footprint
