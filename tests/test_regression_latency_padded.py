"""Regression: a padded dim split over two fan-out axes made mappings the validator rejects.

ResNet-18 on eyeriss_like with ``--objective latency`` (2 s per layer, as ``accelmap compile`` runs it)
stopped with "loop K14 at GLB has iterations that never touch a valid K": the spatial enumeration padded
K=256 to 14 on the 14-wide X axis and unrolled K on the Y axis too (14 x 12 = 168 leaves a temporal
remainder of 2; with those 2 below the array the X loop's last iteration starts at 13 x 12 x 2 = 312).
Every tiling the heuristic and the tiling generators then build from such an unrolling may put the
remainder below the array, so those unrollings are no longer generated.
"""

from __future__ import annotations

import pytest

from accelmap import adopt_precision, dense, get_accelerator
from accelmap.mapping.validate import check_structure
from accelmap.search.space import Constraints
from accelmap.search.spatial import enumerate_spatial
from accelmap.search.tiling import ordered_mapping, temporal_remainder


@pytest.fixture(scope="module")
def eyeriss():
    return get_accelerator("eyeriss_like")


def test_every_spatial_candidate_takes_its_remainder_below_the_array(eyeriss):
    """Each unrolling with the whole temporal remainder in the PEs' register files (the innermost place a
    tiling can put it) is a structurally valid loop nest; before the fix {X: K14, Y: K2} (and K14 with
    Y = 4, 8, 12) on K=256 were not."""
    op = adopt_precision(dense("k256", c=4, k=256), eyeriss)
    space = enumerate_spatial(op, eyeriss, Constraints())
    nlev = len(eyeriss.levels)
    keep = tuple(frozenset(o.name for o in op.operands if o.cls in lv.holds) for lv in eyeriss.levels)
    rows = [space.assignment(r) for r in range(len(space.pes))]
    bad = []
    for spatial in rows:
        below = {nlev - 1: {d: b for d, b in temporal_remainder(op, spatial).items() if b > 1}}
        m = ordered_mapping(below, spatial, keep, op.dim_names, nlev)
        try:
            check_structure(op, eyeriss, m)
        except Exception as e:  # collect them all so the failure names every bad unrolling
            bad.append((spatial, str(e)))
    assert not bad, bad[:4]
    # Padding itself stays: K=256 as 14 on X alone (19 rounds, the last one partial), and as 8 on X
    # times a padded 12 on Y (3 rounds of 96; Y's loop is inside X's, so X's last iteration starts at
    # 7 x 12 x 3 = 252 < 256).
    assert {(1, "X"): {"K": 14}, (1, "Y"): {}} in rows
    assert {(1, "X"): {"K": 8}, (1, "Y"): {"K": 12}} in rows


def test_a_dim_the_constraints_unroll_is_left_to_the_user(eyeriss):
    """A fixed unrolling may pad where a free choice would not (docs/mapper.md); the new rule only
    drops free choices."""
    op = adopt_precision(dense("k256", c=4, k=256), eyeriss)
    fixed = Constraints(spatial={"X": {"K": 14}, "Y": {"K": 2}})
    space = enumerate_spatial(op, eyeriss, fixed)
    assert [space.assignment(r) for r in range(len(space.pes))] == [{(1, "X"): {"K": 14}, (1, "Y"): {"K": 2}}]
