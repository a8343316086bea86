"""The DRAM layout priced by the model and the simulator: a 2-D DMA pays its source's per-row read
latency (``read_row_cycles``) once per contiguous row of a tile, and the layout decides the rows."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import yaml

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator
from accelmap.arch.schema import accelerator_from_dict
from accelmap.cost.dma_rows import load_setup_cycles, tile_rows
from accelmap.cost.model import evaluate
from accelmap.cost.nest_rows import NestRows
from accelmap.errors import SpecError
from accelmap.search.orders import order_costs
from accelmap.tune.measure import measure_one
from accelmap.tune.template import ScheduleTemplate
from accelmap.workload.constructors import conv2d
from accelmap.workload.layouts import laid_out

VTA = get_accelerator("vta_like")
ROW = 16     # VTA's simulated DRAM: 16 cycles per read request (dpiDelay of VTAMemDPIToAXI)


def _with_rows(arch, cycles: int):
    return replace(arch, levels=(replace(arch.levels[0], read_row_cycles=cycles),) + arch.levels[1:])


def _conv(arch, **shape):
    return adopt_precision(conv2d("t", **shape), arch)


def _brute_rows(op, X, mapping, c: int) -> int:
    """Contiguous runs of X's first tile at level c, counted on the addresses of a stored tensor in the
    packed layout (every axis's compute block innermost), axes in X's declared order."""
    inside = [lp for lp in mapping.loops if lp.level >= c]
    ext = {d: math.prod(lp.bound for lp in inside if lp.dim == d) for d in op.dim_names}
    unit = {d: math.prod(lp.bound for lp in inside if lp.dim == d and lp.spatial) for d in op.dim_names}
    outer, inner, box = [], [], []
    for a, ix in enumerate(X.indices):
        full = X.shape[a] if X.shape else 1 + sum(k * (op.sizes[d] - 1) for d, k in ix.terms)
        u = unit[ix.terms[0][0]] if len(ix.terms) == 1 else 1
        assert full % u == 0
        outer.append(full // u)
        inner.append(u)
        box.append(-(-min(1 + sum(k * (ext[d] - 1) for d, k in ix.terms), full) // u))
    addr = np.arange(math.prod(outer) * math.prod(inner)).reshape(outer + inner)
    picked = np.sort(addr[tuple(slice(0, b) for b in box)].ravel())
    return 1 + int(np.count_nonzero(np.diff(picked) != 1))


@pytest.mark.parametrize("shape", [dict(n=1, k=32, h=8, w=8, r=3, s=3, c=64, stride=1, padding=0),
                                   dict(n=2, k=32, h=6, w=10, r=1, s=1, c=48, stride=2, padding=0),
                                   dict(n=1, k=16, h=6, w=6, r=3, s=3, c=32, stride=1, padding=1)])
def test_tile_rows_equal_brute_force_runs_in_both_layouts(shape):
    op = _conv(VTA, **shape)
    t = ScheduleTemplate(op, VTA, layout_knob=True)
    checked = 0
    for p in list(t.space.all_points())[::3]:
        b = t.build(tuple(int(v) for v in p))
        if b.mapping is None or b.error and "capacity" in b.error:
            continue
        for order in ((), ((op.inputs[0].name, t.layouts[1][1]),)):
            lop = laid_out(op, dict(order))
            nest = NestRows.of_mapping(lop, b.arch, b.mapping)
            for X in lop.operands:
                for c in range(1, len(b.arch.levels)):
                    if X.name in b.mapping.keep[c]:
                        assert int(tile_rows(nest, X, c)[0]) == _brute_rows(lop, X, b.mapping, c), \
                            (t.describe(tuple(int(v) for v in p)), X.name, c, order)
                        checked += 1
    assert checked > 100


def test_rows_of_vta_input_tiles_by_hand():
    # layer-48-like 1x1 conv, input 16 channel blocks x 14 x 14: a tile of 16 blocks x 7 rows x 7 columns
    op = _conv(VTA, n=1, k=64, h=14, w=14, r=1, s=1, c=256, stride=1, padding=0)
    t = ScheduleTemplate(op, VTA, layout_knob=True)
    X = op.inputs[0]
    # NCHWnc: the columns are cut, so a row per block and image row; NHWCnc: all 16 blocks of 7 columns
    # are one run, a row per image row
    for layout, rows in (("NCHW", 16 * 7), ("NHWC", 7)):
        values = {"tile_co": 1, "tile_ci": 16, "tile_h": 7, "tile_w": 7, "layout": layout}
        point = tuple(k.options.index(values.get(k.name, k.options[0])) for k in t.space.knobs)
        b = t.build(point)
        lop = laid_out(op, b.layout_map)
        nest = NestRows.of_mapping(lop, b.arch, b.mapping)
        assert int(tile_rows(nest, lop.operand(X.name), 1)[0]) == rows
        arch = _with_rows(b.arch, ROW)
        assert load_setup_cycles(NestRows.of_mapping(lop, arch, b.mapping), lop.operand(X.name), 1, 0)[0] == ROW * rows


@pytest.mark.parametrize("shape", [dict(n=1, k=32, h=8, w=8, r=3, s=3, c=64, stride=1, padding=0),
                                   dict(n=1, k=32, h=8, w=8, r=1, s=1, c=64, stride=1, padding=0)])
def test_simulator_cycles_equal_the_models_with_row_latency_in_both_layouts(shape):
    arch = _with_rows(VTA, ROW)
    op = _conv(arch, **shape)
    t = ScheduleTemplate(op, arch, layout_knob=True)
    points = [tuple(int(v) for v in p) for p in t.space.all_points()]
    # one virtual thread: single-buffered, where the model and the simulator agree exactly
    single = [p for p in points if t.build(p).valid
              and all(v == 1 for k, v in t.space.values(p).items() if k.endswith("nthread"))]
    layouts = {t.space.values(p)["layout"] for p in single}
    assert layouts == {"NCHW", "NHWC"}
    priced = 0
    for p in single[::5]:
        m, s = measure_one(t, "model", p), measure_one(t, "sim", p)
        assert m.cost == s.cost, t.describe(p)
        b = t.build(p)
        # the same program without the row latency is cheaper by at least one row per load
        free = evaluate(laid_out(op, b.layout_map), _with_rows(b.arch, 0), b.mapping, check=False)
        assert m.cost >= free.latency + 2 * ROW
        priced += 1
    assert priced > 20


def test_layout_is_priced_only_through_rows():
    op = _conv(VTA, n=1, k=32, h=8, w=8, r=1, s=1, c=64, stride=1, padding=0)
    t = ScheduleTemplate(op, VTA, layout_knob=True)
    X = op.inputs[0].name
    nhwc = dict(t.layouts)["NHWC"]
    for p in list(t.space.all_points())[:400:7]:
        b = t.build(tuple(int(v) for v in p))
        if not b.valid:
            continue
        # without a row latency the layout changes no cycle
        assert evaluate(laid_out(op, {X: nhwc}), b.arch, b.mapping, check=False).latency == \
            evaluate(op, b.arch, b.mapping, check=False).latency


def test_read_row_cycles_in_an_accelerator_file_and_the_mappers_order_pruning():
    d = yaml.safe_load(yaml.safe_dump({
        "name": "rows", "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 32}},
        "levels": [{"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "read_bandwidth": "8 bit/cycle", "read_row_cycles": 16},
                   {"name": "SRAM", "holds": ["I", "W", "O"], "capacity": "64 KB"}]}))
    acc = accelerator_from_dict(d, "rows.yaml")
    assert acc.levels[0].read_row_cycles == 16 and acc.levels[1].read_row_cycles == 0
    assert order_costs(acc) == ()          # a per-transfer cost: loop orders are no longer interchangeable
    d["levels"][0]["read_row_cycles"] = -1
    with pytest.raises(SpecError, match="read_row_cycles"):
        accelerator_from_dict(d, "rows.yaml")
