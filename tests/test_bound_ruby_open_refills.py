"""Rule B53 (docs/mapper.md): over imperfect (Ruby-S) tiles, an open single-buffered level's least refill stalls
compute (``search/ruby_open_refills.py``). The node bounds must stay below the latency of random imperfect and padded
Ruby-S mappings at every level, the rule must raise some of them, and the exact search must keep the exhaustive
optimum where it cuts."""

from __future__ import annotations

import random

import accelmap.search.open_level_refills as open_level_refills
import accelmap.search.ruby_open_refills as ruby_open_refills
from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.search.imperfect_tiles import ImperfectBoundContext
from accelmap.search.padded_busy_lanes import BusyLaneContext
from accelmap.workload import parse_expression
from test_bound_padded_busy_lanes import pes_under_four
from test_bound_padded_partial import _below, _node
from test_bound_padded_rounds import padded_ruby_s_mappings


def _without_rule():
    """Rule B53 off (the stall of open levels over imperfect tiles 0, as before it); returns the restore function."""
    saved = ruby_open_refills.ruby_open_levels_stall
    ruby_open_refills.ruby_open_levels_stall = lambda ctx, level: 0.0
    ruby_open_refills._RUBY_STALLS.clear()

    def restore():
        ruby_open_refills.ruby_open_levels_stall = saved
    return restore


def _check(arch, op, m, spatial, make) -> tuple[int, int]:
    """Bound <= cost at every level of one mapping, with the rule and without; (levels, levels it raised)."""
    res = evaluate(op, arch, m)
    checked = raised = 0
    for level in range(len(arch.levels) + 1):
        fixed, rem, full = _node(op, m, level)
        got = make(op, arch, m.keep, spatial).lower_bound(fixed, level, rem, full_positions=full)
        assert _below(got, res), (arch.name, op, level, m, got, res.energy_total, res.latency)
        restore = _without_rule()
        try:
            was = make(op, arch, m.keep, spatial).lower_bound(fixed, level, rem, full_positions=full)
        finally:
            restore()
        raised += got[1] > was[1] * (1 + 1e-9)
        checked += 1
    return checked, raised


def test_open_level_refills_over_ruby_s_tiles_never_exceed_the_latency():
    """Random padded Ruby-S mappings of eyeriss_like, simba_like and edge_tpu_like (single-buffered levels, where the
    rule applies) and of a buffer over four small PE registers: at every level the bound with rule B53 is at most the
    mapping's energy and latency; on the small registers it is above the bound without it on some nodes (the presets'
    random operators are small enough that a whole operand fits and no refill is forced)."""
    checked = raised = 0
    archs = [get_accelerator(n) for n in ("eyeriss_like", "simba_like", "edge_tpu_like")]
    for arch, op, m, spatial in padded_ruby_s_mappings(240, archs, seed=11):
        levels, _ = _check(arch, op, m, spatial, BusyLaneContext)
        checked += levels
    for capacity in ("8 B", "16 B"):
        for arch, op, m, spatial in padded_ruby_s_mappings(200, [pes_under_four(capacity)], seed=7):
            levels, up = _check(arch, op, m, spatial, BusyLaneContext)
            checked += levels
            raised += up
    assert checked >= 300 and raised >= 3, (checked, raised)


def test_a_register_file_over_partial_tiles_refills_at_least_the_box_count():
    """A 1-D convolution O[k,p] += I[p+r] * W[k,r] (K = 3, P = 7, R = 3) with DRAM over one register file of 4 elements
    per operand class and 1-element-per-cycle ports: register extents K 2 (a partial last tile), P 2, R 1 below K outer
    and P inner at DRAM. P innermost above the register file: W (no P) enters at least its footprint, O (plain P) and
    I's windows change at every step. Rule B53's least over shapes and cases is positive, the node bound at DRAM's
    level (nothing below fixed) with it is at most the latency and above the bound without it."""
    arch = _dram_over_registers()
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", {"k": 3, "p": 7, "r": 3}, name="conv1d"),
                         arch)
    loops = (Loop("k", 2, 0), Loop("r", 3, 0), Loop("p", 4, 0), Loop("k", 2, 1), Loop("p", 2, 1))
    keep = (frozenset({"I", "W", "O"}),) * 2
    m = Mapping(loops, keep)
    res = evaluate(op, arch, m)
    ctx = ImperfectBoundContext(op, arch, keep, {})
    assert open_level_refills.open_levels_stall(ctx, 2) > 0
    ones = dict.fromkeys(op.dim_names, 1)
    got = ImperfectBoundContext(op, arch, keep, {}).lower_bound(loops[:3], 1, {**ones, "k": 2, "p": 2},
                                                               full_positions=None)
    restore = _without_rule()
    try:
        was = ImperfectBoundContext(op, arch, keep, {}).lower_bound(loops[:3], 1, {**ones, "k": 2, "p": 2},
                                                                   full_positions=None)
    finally:
        restore()
    assert _below(got, res) and got[1] >= was[1], (got, was, res.latency)


def _dram_over_registers():
    from accelmap.arch.schema import accelerator_from_dict

    return accelerator_from_dict({"name": "regs", "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "16 bit",
         "read_energy": "50 pJ", "write_energy": "50 pJ", "read_bandwidth": "16 bit/cycle",
         "write_bandwidth": "16 bit/cycle"},
        {"name": "Reg", "holds": ["I", "W", "O"], "capacity": "16 B", "width": "16 bit",
         "read_energy": "1 pJ", "write_energy": "1 pJ", "read_bandwidth": "16 bit/cycle",
         "write_bandwidth": "16 bit/cycle"}],
        "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 16}}})


def test_random_imperfect_mappings_of_small_registers_never_exceed_the_latency():
    """Random imperfect mappings (any tile edge) of 1-D convolutions and GEMMs on DRAM over a small register file:
    the node bound with rule B53 is at most the latency at every level."""
    from accelmap.errors import MappingError
    from accelmap.mapping.sampling import random_mapping

    arch = _dram_over_registers()
    rng = random.Random(3)
    checked = raised = 0
    for _ in range(150):
        if rng.random() < 0.5:
            sizes = {"k": rng.randint(2, 5), "p": rng.randint(3, 9), "r": rng.randint(1, 3)}
            op = parse_expression("O[k,p] += I[p+r] * W[k,r]", sizes, name="conv1d")
        else:
            sizes = {"m": rng.randint(2, 7), "n": rng.randint(2, 7), "k": rng.randint(2, 5)}
            op = parse_expression("O[m,n] += I[m,k] * W[k,n]", sizes, name="gemm")
        op = adopt_precision(op, arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=40, imperfect=True)
        except MappingError:
            continue
        levels, up = _check(arch, op, m, {}, ImperfectBoundContext)
        checked += levels
        raised += up
    assert checked >= 100 and raised >= 5, (checked, raised)


def test_coarse_cells_cover_every_shape_and_never_raise_the_least_stall(monkeypatch):
    """Cells of a coarser grid (forced by a smaller shape budget) cover every fitting shape: each edge list ends at
    the largest extent, and the least stall over the coarser cells is at most the least over the finer ones (every
    extent at the register files; the global buffer's extents are cells already under the default ``RUBY_CELLS``)."""
    from accelmap.arch import get_accelerator

    assert list(ruby_open_refills.cell_edges(20, 1.5)) == [1, 2, 3, 5, 8, 12, 18, 20]
    assert list(ruby_open_refills.cell_edges(5, 1.0)) == [1, 2, 3, 4, 5]
    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(parse_expression("O[k,p,q] += I[c,p+r,q+s] * W[k,c,r,s]",
                                          {"k": 24, "c": 12, "p": 14, "q": 14, "r": 3, "s": 3}, name="conv"), arch)
    keep = (frozenset({"I", "W", "O"}), frozenset({"I", "O"}), frozenset({"I", "W", "O"}))
    spatial = {"X": {"p": 7, "q": 2}, "Y": {"q": 4, "r": 3}}
    exact = {}
    for c in (1, 2):
        ruby_open_refills._RUBY_SHAPES.clear()
        exact[c] = ruby_open_refills.least_ruby_stall(BusyLaneContext(op, arch, keep, spatial), c)
    monkeypatch.setattr(ruby_open_refills, "RUBY_CELLS", 2_000)
    for c in (1, 2):
        ruby_open_refills._RUBY_SHAPES.clear()
        ctx = BusyLaneContext(op, arch, keep, spatial)
        cells = ruby_open_refills.ruby_level_shapes(ctx, c)
        assert cells is not None and len(cells.upper) <= 2_000
        coarse = ruby_open_refills.least_ruby_stall(ctx, c)
        assert 0 < coarse <= exact[c] * (1 + 1e-12), (c, coarse, exact[c])
    ruby_open_refills._RUBY_SHAPES.clear()


def test_a_padded_resnet_layer_root_bound_rises_and_stays_below_a_mapping():
    """ResNet-18 layer4.0.downsample on eyeriss_like under the padded unrolling X: K14, Y: K3, C4 (K = 512 as two rounds
    of 336 lanes' worth), the global buffer bypassed: a mapping of that subtree (found by the search without the rule)
    costs 144.2 uJ and 176,192 cycles; the root bound of its bypass choice with rule B53 is at most that, and its
    latency is above the bound without the rule (the register files' refills over DRAM's port)."""
    from accelmap.workload.models import load_model

    arch = get_accelerator("eyeriss_like")
    op = adopt_precision({x.name: x for x in load_model("resnet18").layers}["layer4.0.downsample"].operator, arch)
    loops = (Loop("C", 8, 0), Loop("K", 2, 0), Loop("P", 7, 0), Loop("Q", 7, 0), Loop("K", 14, 1, "X"),
             Loop("K", 3, 1, "Y"), Loop("C", 4, 1, "Y"), Loop("C", 8, 2), Loop("K", 8, 2))
    keep = (frozenset({"I", "W", "O"}), frozenset(), frozenset({"I", "W", "O"}))
    spatial = {"X": {"K": 14}, "Y": {"K": 3, "C": 4}}
    res = evaluate(op, arch, Mapping(loops, keep))
    assert (res.energy_total, res.latency) == (144245248.0, 176192.0)
    got = BusyLaneContext(op, arch, keep, spatial).lower_bound((), len(arch.levels), dict(op.sizes),
                                                              full_positions=None)
    restore = _without_rule()
    try:
        was = BusyLaneContext(op, arch, keep, spatial).lower_bound((), len(arch.levels), dict(op.sizes),
                                                                  full_positions=None)
    finally:
        restore()
    assert _below(got, res) and got[1] > was[1] * 1.3, (got, was)
