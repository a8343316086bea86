"""Design spaces: parsing, points, bad input as one line, and area/energy that follow the parameters."""

import math

import pytest
import yaml

from accelmap.dse import components
from accelmap.dse.design import make_design, violation
from accelmap.dse.space import load_space, space_from_dict
from accelmap.errors import SpecError

SPACE = {
    "name": "t",
    "base": "eyeriss_like",
    "parameters": [
        {"name": "glb", "set": "levels.GLB.capacity", "values": ["32 KiB", "64 KiB", "128 KiB"]},
        {"name": "array", "set": ["levels.GLB.fanout.axes.X.size", "levels[1].fanout.axes.Y.size"],
         "values": [[8, 8], [16, 16]]},
    ],
}


def _space(**edits):
    d = yaml.safe_load(yaml.safe_dump(SPACE))
    d.update(edits)
    return d


def test_grid_and_points_apply_every_field():
    s = space_from_dict(_space(), "s.yaml")
    assert s.size == 6
    pts = list(s.grid())
    assert len(pts) == 6 and len(set(pts)) == 6
    a = s.accelerator((("glb", "64 KiB"), ("array", (16, 16))))
    glb = a.level("GLB")
    assert glb.capacity_bits == 64 * 1024 * 8
    assert glb.fanout is not None and glb.fanout.size == 256 and a.num_pes == 256
    assert a.level("RF").instances == 256


def test_random_sample_is_distinct_and_seeded():
    s = space_from_dict(_space(), "s.yaml")
    a, b = s.sample(4, seed=3), s.sample(4, seed=3)
    assert a == b and len(set(a)) == 4 and set(a) <= set(s.grid())
    assert sorted(s.sample(10, seed=0)) == sorted(s.grid())


@pytest.mark.parametrize("edit, expect", [
    ({"parameters": [{"name": "g", "set": "levels.GLB.capacity", "values": ["32 KiBB"]}]},
     "s.yaml: parameters[0].values[0] = '32 KiBB' applied to eyeriss_like: levels[1].capacity"),
    ({"parameters": [{"name": "g", "set": "levels.SRAM.capacity", "values": ["32 KiB"]}]},
     "s.yaml: parameters[0].set: path 'levels.SRAM.capacity': levels has no item named 'SRAM'; items: DRAM, GLB, RF"),
    ({"parameters": [{"name": "g", "set": "levels.GLB.fanout.axes.X.size", "values": [0]}]},
     "s.yaml: parameters[0].values[0] = 0 applied to eyeriss_like: levels[1].fanout.axes[0].size"),
    ({"parameters": [{"name": "a", "set": ["levels.GLB.capacity", "levels.RF.width"], "values": [[1]]}]},
     "s.yaml: parameters[0].values[0]: [1] must be a list of 2 values, one per field in 'set'"),
    ({"base": "nope_like"}, "s.yaml: base: 'nope_like' is neither a preset"),
    ({"constraints": {"max_area": "4 acres"}}, "s.yaml: constraints.max_area: '4 acres' is not an area"),
    ({"constraints": {"max_sram": "unbounded"}}, "s.yaml: constraints.max_sram: must be a size"),
    ({"serach": {}}, "s.yaml: serach: unknown key 'serach'"),
    ({"mapper": {"strategy": "best"}}, "s.yaml: mapper.strategy: unknown strategy 'best'"),
    ({"search": {"method": "bayes"}}, "s.yaml: search.method: Input should be 'grid', 'random' or 'sunstone'"),
])
def test_bad_space_is_one_line_naming_file_field_value(edit, expect):
    with pytest.raises(SpecError) as e:
        space_from_dict(_space(**edit), "s.yaml")
    msg = str(e.value)
    assert msg.startswith(expect), msg
    assert "\n" not in msg


def test_cli_bad_space_exits_2(tmp_path):
    from click.testing import CliRunner

    from accelmap.cli import main
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(_space(parameters=[{"name": "g", "set": "levels.GLB.capacity",
                                                    "values": ["-3 KiB"]}])))
    r = CliRunner().invoke(main, ["dse", str(p), "--model", "resnet18"])
    assert r.exit_code == 2
    assert r.output.startswith(f"error: {p}: parameters[0].values[0] = '-3 KiB'"), r.output
    assert r.output.count("\n") == 1


def test_bundled_eyeriss_sweep_loads():
    from importlib import resources
    p = resources.files("accelmap") / "data" / "dse" / "eyeriss_sweep.yaml"
    s = load_space(str(p))
    assert s.size == 6 * 4 * 3


def test_sram_figures_are_the_table_rows_and_interpolate_monotonically():
    rows = [p for p in components.component_table() if p.kind == "sram" and p.width_bits == 16]
    for p in rows:
        assert components.sram(p.size_bits, 16) == pytest.approx((p.read_pj, p.write_pj, p.area_um2))
    # Between two rows: log-log interpolation lies between them; energy and area grow with capacity.
    lo, hi = rows[8], rows[9]
    size = int(math.sqrt(lo.size_bits * hi.size_bits))
    mid = components.sram(size, 16)
    assert lo.read_pj < mid[0] < hi.read_pj and lo.area_um2 < mid[2] < hi.area_um2
    t = math.log(size / lo.size_bits) / math.log(hi.size_bits / lo.size_bits)
    assert mid[0] == pytest.approx(lo.read_pj ** (1 - t) * hi.read_pj ** t)
    # A width between the table's widths lies between them too (CACTI picks a different array
    # organisation per width, so energy is not always monotone in the width).
    e16, e32 = components.sram(2 ** 16, 16)[0], components.sram(2 ** 16, 32)[0]
    assert min(e16, e32) < components.sram(2 ** 16, 24)[0] < max(e16, e32)


def test_mac_follows_aladdin_quadratic_multiplier():
    e8, a8 = components.mac(8, 32)
    e16, a16 = components.mac(16, 32)
    mul = {p.width_bits: p for p in components.component_table() if p.kind == "multiplier"}
    add32 = next(p for p in components.component_table() if p.kind == "adder" and p.width_bits == 32)
    assert e8 == pytest.approx(mul[8].read_pj + add32.read_pj)
    assert (e16 - add32.read_pj) / (e8 - add32.read_pj) == pytest.approx(4.0, rel=1e-3)
    assert a16 > a8


def test_design_energy_and_area_follow_parameters():
    s = space_from_dict(_space(), "s.yaml")
    small = make_design(s, (("glb", "32 KiB"), ("array", (8, 8))))
    big = make_design(s, (("glb", "128 KiB"), ("array", (8, 8))))
    wide = make_design(s, (("glb", "32 KiB"), ("array", (16, 16))))
    assert small.accelerator is not None and big.accelerator is not None and wide.accelerator is not None
    g_s, g_b = small.accelerator.level("GLB"), big.accelerator.level("GLB")
    assert g_s.read_energy_pj == pytest.approx(components.sram(32 * 1024 * 8, 16)[0])
    assert g_b.read_energy_pj == pytest.approx(components.sram(128 * 1024 * 8, 16)[0])
    # The RF is priced at its largest partition (W, 224 words of 16 bits).
    assert small.accelerator.level("RF").read_energy_pj == pytest.approx(components.sram(224 * 16, 16)[0])
    dram = small.accelerator.level("DRAM")
    assert dram.read_energy_pj == pytest.approx(8.0 * 16)
    # Area: the sum of its parts; a bigger buffer or array is bigger, the array's wires longer.
    parts = dict(small.area_parts)
    rf_um2 = sum(components.sram(b, 16)[2] for b in (12 * 16, 224 * 16, 24 * 16))
    assert parts["RF"] == pytest.approx(64 * rf_um2 / 1e6)
    assert parts["MAC"] == pytest.approx(64 * components.mac(16, 16)[1] / 1e6)
    assert small.area_mm2 == pytest.approx(sum(parts.values()))
    assert big.area_mm2 > small.area_mm2 and wide.area_mm2 > small.area_mm2
    assert wide.accelerator.level("GLB").fanout.transfer_energy_pj > g_s.fanout.transfer_energy_pj
    assert small.sram_bits == 32 * 1024 * 8 + 64 * (12 + 224 + 24) * 16


def test_base_energies_kept_when_asked_and_constraints_filter():
    s = space_from_dict(_space(energy="base", constraints={"max_area": "0.35 mm2", "max_sram": "40 KiB"}), "s.yaml")
    d = make_design(s, (("glb", "32 KiB"), ("array", (8, 8))))
    assert d.accelerator is not None and d.accelerator.level("GLB").read_energy_pj == 6.0
    assert violation(s, d) is not None   # 32 KiB GLB + 64 x 520 B of RF > 40 KiB
    ok = space_from_dict(_space(constraints={"max_area": "100 mm2"}), "s.yaml")
    assert violation(ok, make_design(ok, (("glb", "32 KiB"), ("array", (8, 8))))) is None
