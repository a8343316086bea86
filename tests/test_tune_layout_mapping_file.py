"""The layout knob's choice written in the tuned mapping file, and read back by evaluate, simulate and codegen."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator
from accelmap.cli.evaluate_cmd import load_laid_out
from accelmap.cost.model import evaluate
from accelmap.errors import SpecError
from accelmap.report.tuning_report import write_tuning_folder
from accelmap.sim.simulate import simulate
from accelmap.tune.loop import TuneRun
from accelmap.tune.measure import measure_one
from accelmap.tune.session import TuneReport
from accelmap.tune.template import ScheduleTemplate
from accelmap.workload.constructors import conv2d
from accelmap.workload.layouts import laid_out, layout_names, layouts_from_names

VTA = get_accelerator("vta_like")
ROWS = replace(VTA, levels=(replace(VTA.levels[0], read_row_cycles=16),) + VTA.levels[1:])


def _conv(arch):
    return adopt_precision(conv2d("t", n=1, k=32, h=8, w=8, r=3, s=3, c=64, stride=1, padding=0), arch)


def test_layout_names_round_trip_and_name_the_axes_by_their_indices():
    op = _conv(VTA)
    names = layout_names(op, {"I": (0, 2, 3, 1)})
    assert names == {"I": ["N", "P+R", "Q+S", "C"]}
    assert layouts_from_names(op, names, "f") == {"I": (0, 2, 3, 1)}
    assert laid_out(op, {"I": (0, 2, 3, 1)}).operands[1].shape == (1, 8, 8, 64)


@pytest.mark.parametrize("data, message", [
    ({"X": ["N"]}, "f: unknown operand 'X'; t has O, I, W"),
    ({"I": ["N", "C", "P+R"]}, "f.I: ['N', 'C', 'P+R'] is not an order of its axes; write each of "
                               "['N', 'C', 'P+R', 'Q+S'] once, outermost first"),
    ({"I": ["N", "C", "C", "Q+S"]}, "f.I: ['N', 'C', 'C', 'Q+S'] is not an order of its axes"),
    (["I"], "f: 'layouts' must map operand names to their axes in DRAM order, got ['I']"),
])
def test_a_bad_layout_is_one_line_naming_the_entry(data, message):
    with pytest.raises(SpecError) as e:
        layouts_from_names(_conv(VTA), data, "f")
    assert str(e.value).startswith(message)


def _tuned_folder(tmp_path, template, point):
    m = measure_one(template, "model", point)
    rep = TuneReport(template, "model", [TuneRun("validity", [m])], 1, 0, 0.0, "cycles")
    write_tuning_folder(rep, tmp_path / "out", None, plots=False)
    return tmp_path / "out" / "best.mapping.yaml", m.cost


def test_the_tuned_mapping_file_states_a_channels_last_layout_and_evaluates_to_the_tuned_cost(tmp_path):
    op = _conv(ROWS)
    t = ScheduleTemplate(op, ROWS, layout_knob=True)
    points = [tuple(int(v) for v in p) for p in t.space.all_points()]
    single = lambda p: all(v == 1 for k, v in t.space.values(p).items() if k.endswith("nthread"))  # noqa: E731
    # a single-buffered configuration in NHWC whose rows make it cost other than the same tiling in NCHW
    nhwc = next(p for p in points if t.build(p).valid and single(p) and t.space.values(p)["layout"] == "NHWC"
                and evaluate(op, t.build(p).arch, t.build(p).mapping, check=False).latency != measure_one(t, "model", p).cost)
    path, cost = _tuned_folder(tmp_path, t, nhwc)
    assert cost == 37_968
    data = yaml.safe_load(path.read_text())
    assert data["layouts"] == {"I": ["N", "P+R", "Q+S", "C"]}
    arch = t.build(nhwc).arch      # the buffering the configuration builds (best.arch.yaml when not the preset's)
    assert arch is not None
    lop, m = load_laid_out(str(path), arch, op)
    assert lop.operands[1].indices == laid_out(op, {"I": (0, 2, 3, 1)}).operands[1].indices
    assert evaluate(lop, arch, m).latency == cost
    assert simulate(lop, arch, m, functional=False).cycles == cost     # single-buffered: the simulator agrees
    assert evaluate(op, arch, m).latency != cost                       # read in the workload's order it differs
    # the workload's own order states no layout
    nchw = next(p for p in points if t.build(p).valid and t.space.values(p)["layout"] == "NCHW")
    path, _ = _tuned_folder(tmp_path / "nchw", t, nchw)
    assert "layouts" not in yaml.safe_load(path.read_text())
    assert load_laid_out(str(path), ROWS, op)[0] is op


def test_a_mapping_file_with_an_unknown_operand_in_its_layouts_is_refused(tmp_path):
    op = _conv(VTA)
    t = ScheduleTemplate(op, VTA, layout_knob=True)
    point = next(tuple(int(v) for v in p) for p in t.space.all_points() if t.build(tuple(int(v) for v in p)).valid)
    path, _ = _tuned_folder(tmp_path, t, point)
    data = yaml.safe_load(path.read_text())
    data["layouts"] = {"Z": ["N"]}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"best.mapping.yaml: layouts: unknown operand 'Z'"):
        load_laid_out(str(path), VTA, op)

