"""ZigZag hardware/mapping YAML import, on small files in ZigZag's format written here."""

import pytest
import yaml
from click.testing import CliRunner

from accelmap.arch import get_accelerator
from accelmap.arch.zigzag_import import (load_zigzag_accelerator, load_zigzag_spatial_constraints,
                                         zigzag_operand_links, zigzag_spatial_hints, zigzag_to_dict)
from accelmap.cli import main
from accelmap.cost.model import evaluate
from accelmap.errors import SpecError
from accelmap.mapping import Loop, Mapping
from accelmap.workload.constructors import gemm


def mem(size, r, w, operands, served, bw_min=8, bw_max=None, rw=False, **extra):
    bw_max = bw_max or bw_min
    if rw:
        ports = [{"name": "rw_port_1", "type": "read_write", "bandwidth_min": bw_min, "bandwidth_max": bw_max,
                  "allocation": [f"{o}, fh" for o in operands]}]
    else:
        ports = [{"name": "r_port_1", "type": "read", "bandwidth_min": bw_min, "bandwidth_max": bw_max,
                  "allocation": [f"{o}, tl" for o in operands]},
                 {"name": "w_port_1", "type": "write", "bandwidth_min": bw_min, "bandwidth_max": bw_max,
                  "allocation": [f"{o}, fh" for o in operands]}]
    return {"size": size, "r_cost": r, "w_cost": w, "area": 0, "latency": 1, "operands": operands,
            "ports": ports, "served_dimensions": served, **extra}


def tpu_small():
    # Modelled on zigzag/inputs/hardware/tpu_like.yaml, with a 4x4 array.
    return {"name": "tpu_small", "memories": {
        "rf_128B": mem(1024, 0.095, 0.095, ["I2"], []),
        "rf_2B": mem(16, 0.021, 0.021, ["O"], [], bw_min=16),
        "sram_2MB": mem(16777216, 416.16, 378.4, ["I1", "O"], ["D1", "D2"], bw_min=64, bw_max=2048),
        "dram": mem(10000000000, 700, 750, ["I1", "I2", "O"], ["D1", "D2"], bw_min=64, rw=True),
    }, "operational_array": {"unit_energy": 0.04, "unit_area": 1, "dimensions": ["D1", "D2"], "sizes": [4, 4]}}


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def test_tpu_like_converts_level_by_level(tmp_path):
    acc, notes = load_zigzag_accelerator(write(tmp_path, "tpu.yaml", tpu_small()))
    assert notes == []
    assert [lv.name for lv in acc.levels] == ["dram", "sram_2MB", "rf_2B", "rf_128B"]
    dram, sram, rf_o, rf_w = acc.levels
    assert dram.holds == ("I", "W", "O") and sram.holds == ("I", "O")
    assert rf_o.holds == ("O",) and rf_w.holds == ("W",)
    assert sram.capacity_bits == 16777216 and rf_w.capacity_bits == 1024 and rf_o.capacity_bits == 16
    # ZigZag prices one access of bandwidth_max bits (2048 here), not of bandwidth_min (64).
    assert (sram.width_bits, sram.read_energy_pj, sram.write_energy_pj) == (2048, 416.16, 378.4)
    assert (sram.read_bw_bits, sram.write_bw_bits) == (2048, 2048)
    assert (dram.read_bw_bits, dram.write_bw_bits, dram.width_bits) == (64, 64, 64)
    assert rf_o.width_bits == 16 and rf_w.width_bits == 8
    assert [(a.name, a.size) for a in sram.fanout.axes] == [("D1", 4), ("D2", 4)]
    assert rf_o.fanout is None and rf_w.fanout is None and rf_w.instances == 16
    assert acc.compute.mac_energy_pj == 0.04 and acc.num_pes == 16
    assert acc.compute.supported_bits("I") == (8,) and acc.compute.supported_bits("O") == (16, 32)


def test_converted_accelerator_evaluates(tmp_path):
    acc, _ = load_zigzag_accelerator(write(tmp_path, "tpu.yaml", tpu_small()))
    op = gemm("g", m=8, n=8, k=8, bits={"O": 16})
    m = Mapping((Loop("M", 2, 1), Loop("N", 2, 1), Loop("K", 2, 1), Loop("M", 4, 1, "D1"), Loop("N", 4, 1, "D2"),
                 Loop("K", 4, 3)),
                (frozenset("OAB"), frozenset("OA"), frozenset("O"), frozenset("B")))
    r = evaluate(op, acc, m)
    assert r.macs == 512 and r.spatial_utilization == 1.0


def test_equal_single_operand_memories_merge_into_a_partitioned_level(tmp_path):
    # Modelled on zigzag/inputs/hardware/eyeriss_like.yaml.
    data = {"name": "ey", "memories": {
        "rf_64B_A": mem(512, 1.0, 1.5, ["I1"], []),
        "rf_64B_W": mem(512, 1.0, 1.5, ["I2"], []),
        "rf_16B": mem(128, 1.5, 2.0, ["O"], [], bw_min=24),
        "sram_8KB": mem(65536, 10.0, 15.0, ["O"], ["D1", "D2"], bw_min=128, rw=True),
        "sram_64KB": mem(524288, 20, 25, ["I2"], ["D1", "D2"], bw_min=128),
        "sram_1M": mem(8388608, 100, 130, ["I1", "O"], ["D1", "D2"], bw_min=384, rw=True),
        "dram": mem(10000000000, 1000, 1000, ["I1", "I2", "O"], ["D1", "D2"], bw_min=64, rw=True),
    }, "operational_array": {"unit_energy": 0.5, "unit_area": 0.1, "dimensions": ["D1", "D2"], "sizes": [14, 12]}}
    acc, notes = load_zigzag_accelerator(write(tmp_path, "ey.yaml", data))
    assert notes == []
    assert [lv.name for lv in acc.levels] == ["dram", "sram_1M", "sram_64KB", "sram_8KB", "rf_16B",
                                              "rf_64B_W.rf_64B_A"]
    rf = acc.levels[-1]
    assert dict(rf.partitions) == {"I": 512, "W": 512}
    assert acc.level("sram_8KB").fanout.size == 168
    assert acc.num_pes == 168


def test_crossing_served_dims_make_a_shared_column_accumulator(tmp_path):
    # Modelled on zigzag/inputs/hardware/edge_tpu_like.yaml: W register shared over D3,D4, O register over D2.
    data = {"name": "edge", "memories": {
        "rf_1B": mem(8, 0.01, 0.01, ["I2"], ["D3", "D4"]),
        "rf_2B": mem(16, 0.02, 0.02, ["O"], ["D2"], bw_min=16),
        "sram_32KB": mem(262144, 22.9, 52.01, ["I2"], ["D1", "D2", "D3", "D4"], bw_min=64, bw_max=512),
        "sram_2MB": mem(16777216, 416.16, 378.4, ["I1", "O"], ["D1", "D2", "D3", "D4"], bw_min=64, bw_max=2048),
        "dram": mem(10000000000, 700, 750, ["I1", "I2", "O"], ["D1", "D2"], bw_min=64, rw=True),
    }, "operational_array": {"unit_energy": 0.04, "unit_area": 1, "dimensions": ["D1", "D2", "D3", "D4"],
                             "sizes": [8, 8, 4, 4]}}
    acc, notes = load_zigzag_accelerator(write(tmp_path, "edge.yaml", data))
    assert notes == ["dram is outermost, so it serves the whole array (file says ['D1', 'D2'])"]
    assert [lv.name for lv in acc.levels] == ["dram", "sram_2MB", "sram_32KB", "rf_1B", "rf_2B"]
    assert [a.name for a in acc.level("sram_32KB").fanout.axes] == ["D1", "D2"]
    assert [a.name for a in acc.level("rf_1B").fanout.axes] == ["D3", "D4"]
    # rf_2B serves D2, which crosses rf_1B's D3, D4: it sits below every fan-out, one instance shared along
    # D2 (a column's accumulator): 1024 / 8 instances
    assert acc.level("rf_2B").shared_axes == ("D2",) and acc.level("rf_1B").shared_axes == ()
    assert acc.level("rf_1B").instances == 64 and acc.level("rf_2B").instances == 128
    # memories written whole in one access are registers, refilled at the clock edge; the others are not
    assert [lv.written_at_clock_edge for lv in acc.levels] == [False, False, False, True, True]
    # the SRAMs double-buffer when two of a mapping's tiles fit (ZigZag's rule); the top receives no tiles
    assert [lv.double_buffered_when_fits for lv in acc.levels] == [False, True, True, False, False]
    # ... and otherwise refill during the last reads of the current tile
    assert [lv.refill_while_read for lv in acc.levels] == [False, True, True, False, False]
    # ZigZag loads a tile kept for the whole run within the port's spare bandwidth during compute
    assert all(lv.stream_single_tile for lv in acc.levels)
    # ZigZag caps a tile's extent at the stored one: a tile spanning a whole padded axis moves real input only
    assert acc.padding_generated


def test_operand_links_from_the_mapping_file_decide_which_is_the_weight(tmp_path):
    hw = write(tmp_path, "tpu.yaml", tpu_small())
    swapped = write(tmp_path, "map.yaml", [{"name": "default", "spatial_mapping": {"D1": ["K, 4"], "D2": ["C, 4"]},
                                            "memory_operand_links": {"O": "O", "W": "I1", "I": "I2"}}])
    acc, _ = load_zigzag_accelerator(hw, swapped)
    assert acc.level("rf_128B").holds == ("I",)
    assert acc.level("sram_2MB").holds == ("W", "O")


def test_spatial_constraints_and_hints(tmp_path):
    # Modelled on zigzag/inputs/mapping/edge_tpu_like_mixed.yaml.
    p = write(tmp_path, "map.yaml", [
        {"name": "default",
         "spatial_mapping": {"D1": ["K, 8"], "D2": ["C, 2", "FX, 2", "FY, 2"], "D3": ["OX, 2", "OY, 2"]},
         "spatial_mapping_hint": {"D4": ["OX", "OY"]},
         "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"}},
        {"name": "Add", "spatial_mapping": {"D1": ["G, 8"], "D2": ["C, 1"]},
         "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"}},
    ])
    assert load_zigzag_spatial_constraints(p) == {"D1": [("K", 8)], "D2": [("C", 2), ("S", 2), ("R", 2)],
                                                  "D3": [("Q", 2), ("P", 2)]}
    assert load_zigzag_spatial_constraints(p, layer="Add") == {"D1": [("G", 8)], "D2": [("C", 1)]}
    assert load_zigzag_spatial_constraints(p, layer="Conv_3") == load_zigzag_spatial_constraints(p)
    data = yaml.safe_load(p.read_text())
    assert zigzag_spatial_hints(data, str(p)) == {"D4": ["Q", "P"]}
    assert zigzag_operand_links(data, str(p)) == {"O": "O", "I2": "W", "I1": "I"}


@pytest.mark.parametrize("change,match", [
    (lambda d: d["operational_array"].update(is_imc=True), "operational_array.is_imc: in-memory-computing"),
    (lambda d: d["memories"]["rf_2B"].pop("r_cost"), "memories.rf_2B.r_cost: 'r_cost' is required"),
    (lambda d: d["memories"]["rf_2B"].update(served_dimensions=["D7"]), "memories.rf_2B.served_dimensions"),
    (lambda d: d["memories"]["rf_2B"].update(operands=["I3"]), "memories.rf_2B.operands"),
    (lambda d: d["memories"]["rf_2B"].update(size=-4), r"memories.rf_2B.size: size \(bits\) must be"),
    (lambda d: d["operational_array"].pop("unit_energy"), "'unit_energy'"),
])
def test_bad_zigzag_files_name_the_field(tmp_path, change, match):
    d = tpu_small()
    change(d)
    with pytest.raises(SpecError, match=match):
        zigzag_to_dict(d, "zz.yaml")


def test_cli_show_detects_zigzag_and_convert_writes_our_format(tmp_path):
    hw = write(tmp_path, "tpu.yaml", tpu_small())
    r = CliRunner().invoke(main, ["arch", "show", str(hw), "--png", str(tmp_path / "t.png")])
    assert r.exit_code == 0, r.output
    assert "sram_2MB (x1)" in r.output and "fan-out x16: D1=4" in r.output
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = tmp_path / "ours.yaml"
    r = CliRunner().invoke(main, ["arch", "convert", str(hw), "-o", str(out)])
    assert r.exit_code == 0, r.output
    direct, _ = load_zigzag_accelerator(hw)
    again = get_accelerator(str(out))
    assert again.levels == direct.levels and again.compute == direct.compute


def test_cli_convert_of_a_missing_file_writes_nothing(tmp_path):
    r = CliRunner().invoke(main, ["arch", "convert", "nothing.yaml", "-o", str(tmp_path / "x.yaml")])
    assert r.exit_code == 2 and "nothing.yaml: file not found" in r.output
    assert not (tmp_path / "x.yaml").exists()


def test_cli_convert_refuses_a_file_in_our_format(tmp_path):
    from accelmap.arch.presets import preset_path
    r = CliRunner().invoke(main, ["arch", "convert", str(preset_path("tpu_like")), "-o", str(tmp_path / "x.yaml")])
    assert r.exit_code == 2 and "not a ZigZag hardware file" in r.output
    assert not (tmp_path / "x.yaml").exists()


def test_map_accepts_a_zigzag_hardware_file(tmp_path):
    from click.testing import CliRunner

    from accelmap.cli import main

    hw = write(tmp_path, "tpu.yaml", tpu_small())
    wl = tmp_path / "mm.yaml"
    wl.write_text("name: mm\ngemm: {m: 4, n: 4, k: 4}\n")
    r = CliRunner().invoke(main, ["map", str(wl), "--arch", str(hw), "--no-cache", "--no-plots",
                                  "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert "total (1 nodes in 1 distinct layers): 64 MACs" in r.output
