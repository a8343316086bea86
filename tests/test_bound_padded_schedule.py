"""Rule S1's MAC schedule of a padded unrolling (docs/mapper.md, ``unrolling_stall.padded_schedule``): the temporal
loops over each dim cover what its unrolling leaves, so the schedule is at least the product of each dim's rounds,
not MACs over PEs. The bound stays below the cost of random padded mappings
(``tests/test_search.py::test_spatial_lower_bound_never_exceeds_the_cost`` runs it through ``spatial_lower_bound``;
``test_exact_search_with_spatial_unrolling_equals_exhaustive`` and ``tests/test_search_padded_unrollings.py`` the
exact search that ranks and cuts by it); here the values and the ranking it changes on eyeriss_like."""

import numpy as np

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.mapping.loopnest import Loop
from accelmap.search.bounds import chain_options
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import spatial_lower_bound
from accelmap.search.unrolling_stall import padded_schedule
from accelmap.workload import gemm
from accelmap.workload.models import load_model


def test_the_schedule_counts_whole_rounds():
    """GEMM M=5 unrolled by 4 (two rounds, the second partial) and N=6 by 3: 2 x 2 x 7 = 28 cycles, where 5 x 6 x 7 MACs
    over 12 PEs give 18; a dividing unrolling keeps MACs over PEs."""
    op = gemm("g", m=5, n=6, k=7)
    used = np.ones((2, len(op.dim_names)), dtype=np.int64)
    dims = op.dim_names
    used[0, dims.index("M")], used[0, dims.index("N")] = 4, 3
    used[1, dims.index("N")], used[1, dims.index("K")] = 6, 7
    assert padded_schedule(op, used).tolist() == [28.0, 5.0]


def test_padded_unrollings_no_longer_rank_first_on_eyeriss_like():
    """ResNet-18 layer1.0.conv1 on eyeriss_like, K=64 as 14 on the columns and 3 on the rows beside C=4: two rounds of
    K, 903,168 cycles of MACs where MACs over its 168 PEs gave 688,128 (and every one of the first six unrollings E1
    visited was such a padded one, each searched over Ruby-S tiles, where the open-level rules are off)."""
    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(next(x for x in load_model("resnet18").layers if x.name == "layer1.0.conv1").operator, arch)
    spatial = (Loop("K", 14, 1, "X"), Loop("K", 3, 1, "Y"), Loop("C", 4, 1, "Y"))
    chains = chain_options(op, keep_options(op, arch, Constraints()))
    _, latency = spatial_lower_bound(op, arch, spatial, chains)
    assert op.macs / 168 == 688_128 and latency >= 903_168
    dividing = (Loop("P", 14, 1, "X"), Loop("P", 4, 1, "Y"), Loop("R", 3, 1, "Y"))
    assert spatial_lower_bound(op, arch, dividing, chains)[1] < latency
