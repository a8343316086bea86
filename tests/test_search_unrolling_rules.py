"""Rules S6 (level sets that cannot hold an operand's smallest tile under an unrolling) and S7 (single-buffered
loads and stores add to the MAC schedule under every unrolling) of docs/mapper.md."""

import random

import numpy as np

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Loop
from accelmap.mapping.sampling import random_mapping
from accelmap.mapping.validate import tile_fits
from accelmap.search.bounds import chain_options, spatial_bounds
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import dims_used, group_merges, spatial_lower_bound
from accelmap.search.unrolling_fit import unrolling_chain_fits
from accelmap.search.unrolling_stall import stall_terms
from accelmap.workload import conv2d
from strategies import random_operator

PRESETS = ["eyeriss_like", "tpu_like", "vta_like", "simba_like", "edge_tpu_like", "ascend_like", "diana_like"]


def _one_row(op, arch, loops):
    """(axes, per_axis) of one unrolling given as spatial loops, as ``unrolling_chain_fits`` takes them."""
    axes, per_axis = [], []
    for l in loops:
        B = np.ones((1, len(op.dim_names)), dtype=np.int64)
        B[0, op.dim_names.index(l.dim)] = l.bound
        axes.append((l.level, arch.fanout_axis(l.level, l.axis)))
        per_axis.append(B)
    return axes, per_axis


def _bounds_without_s6_s7(op, arch, loops, chains):
    dims = op.dim_names
    groups = []
    for l in loops:
        B = np.ones((1, len(dims)), dtype=np.int64)
        B[0, dims.index(l.dim)] = l.bound
        groups.append((l.level, arch.fanout_axis(l.level, l.axis).multicast, B))
    pes = np.array([float(np.prod([l.bound for l in loops]))])
    e, lat = spatial_bounds(op, arch, group_merges(op, len(arch.levels), groups, dims_used(op)), pes, chains)
    return float(e[0]), float(lat[0])


def test_a_valid_mappings_own_level_sets_always_fit_its_unrolling_and_the_rules_bite():
    """Rule S6 is a necessary condition: every valid random mapping's own level sets pass it under its own
    unrolling. Rules S6 and S7 together keep S1 a bound of every such mapping, and on these draws S7 raises the
    latency (S6 bites on edge_tpu_like below), so the property is exercised."""
    rng = random.Random(61)
    checked = raised = 0
    for n in range(40):
        arch = get_accelerator(PRESETS[n % len(PRESETS)])
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30, imperfect=bool(n % 3 == 0))
        except MappingError:
            continue
        res = evaluate(op, arch, m)
        spatial = tuple(l for l in m.loops if l.spatial and l.bound > 1)
        every = chain_options(op, keep_options(op, arch, Constraints()))
        own = {X.name: [[i for i, kp in enumerate(m.keep) if X.name in kp]] for X in op.operands}
        axes, per_axis = _one_row(op, arch, spatial)
        fits = unrolling_chain_fits(op, arch, axes, per_axis, 1, own)
        assert all(bool(masks[0][0]) for masks in fits.values()), (arch.name, m)
        e_lb, l_lb = spatial_lower_bound(op, arch, spatial, every)
        assert e_lb <= res.energy_total * (1 + 1e-12) and l_lb <= res.latency * (1 + 1e-12), (arch.name, m)
        raised += l_lb > _bounds_without_s6_s7(op, arch, spatial, every)[1] * (1 + 1e-9)
        checked += 1
    assert checked > 20 and raised > 0, (checked, raised)


def test_edge_tpu_output_register_cannot_take_outputs_spread_below_it():
    """edge_tpu_like's output register holds one 16-bit partial sum per PE column: with an output dim on its
    fan-out (D2) the smallest output tile there is 4 elements, so no level set with that register is open to
    the output; with only a reduced dim there it is one element, and the register stays open."""
    arch = get_accelerator("edge_tpu_like")
    op = adopt_precision(conv2d("c", n=1, k=64, c=64, h=9, w=9, r=3, s=3), arch)
    oreg = arch.level_index("OReg")
    chains = chain_options(op, keep_options(op, arch, Constraints()))
    for d2, open_ in ((Loop("K", 4, oreg, "D2"), False), (Loop("C", 8, oreg, "D2"), True)):
        loops = (Loop("K", 8, oreg - 1, "D1"), d2)
        axes, per_axis = _one_row(op, arch, loops)
        fits = unrolling_chain_fits(op, arch, axes, per_axis, 1, chains)
        for chain, ok in zip(chains["O"], fits["O"], strict=True):
            assert bool(ok[0]) == (open_ or oreg not in chain), (d2, chain)
        # The validator agrees: the register's smallest tile fits exactly when S6 says so.
        ext = {d: 1 for d in op.dim_names}
        ext[d2.dim] = d2.bound
        assert tile_fits(op, arch, frozenset({"O"}), oreg, ext) == open_
        assert all(bool(ok[0]) for ok in fits["W"])       # one weight per register always fits
    # Random valid mappings of the layer: S6 leaves level sets out under some of their unrollings, never their own,
    # and the bound with it stays below their cost.
    rng = random.Random(7)
    left_out = 0
    for _ in range(12):
        m = random_mapping(op, arch, rng, check_fit=True, spatial_prob=0.9)
        spatial = tuple(l for l in m.loops if l.spatial and l.bound > 1)
        axes, per_axis = _one_row(op, arch, spatial)
        fits = unrolling_chain_fits(op, arch, axes, per_axis, 1, chains)
        for X in op.operands:
            own = [i for i, kp in enumerate(m.keep) if X.name in kp]
            assert bool(fits[X.name][chains[X.name].index(own)][0]), m
            left_out += sum(not bool(ok[0]) for ok in fits[X.name])
        res = evaluate(op, arch, m)
        e_lb, l_lb = spatial_lower_bound(op, arch, spatial, chains)
        assert e_lb <= res.energy_total * (1 + 1e-12) and l_lb <= res.latency * (1 + 1e-12), m
    assert left_out > 0


def test_simba_weights_streamed_from_dram_stall_compute():
    """simba_like, ResNet-18 layer4.0.conv1 unrolled K=4x4 over the global buffer's array and P=7, C=8 over the
    PE's vector lanes (896 PEs): every level is single-buffered, and the weights (1,179,648 bytes, past the
    global buffer into the PE weight buffers) and the inputs (57,600 bytes) queue on DRAM's 64-bit read port
    while compute waits, so latency is at least 57,802,752 / 896 = 64,512 cycles of MACs plus 147,456 + 7,200
    cycles of loads: 219,168. Without rule S7 the bound was the DRAM port alone (154,656 and the outputs' part)."""
    arch = get_accelerator("simba_like")
    op = adopt_precision(conv2d("layer4.0.conv1", n=1, k=512, c=256, h=14, w=14, r=3, s=3, stride=2, padding=1), arch)
    glb, acc = arch.level_index("GLB"), arch.level_index("PEAccBuf")
    loops = (Loop("K", 4, glb, "PX"), Loop("K", 4, glb, "PY"), Loop("P", 7, acc, "VK"), Loop("C", 8, acc, "VC"))
    chains = chain_options(op, keep_options(op, arch, Constraints()))
    compute, vectors = stall_terms(op, arch, np.array([896.0]), chains)
    assert compute[0] == 64_512
    assert max(v.max() for v in vectors["W"]) == 147_456
    _, l_lb = spatial_lower_bound(op, arch, loops, chains)
    assert l_lb == 219_168
    assert _bounds_without_s6_s7(op, arch, loops, chains)[1] < 160_000
