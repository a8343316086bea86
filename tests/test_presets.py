"""Every bundled preset loads, states the facts it cites, and evaluates mappings."""

import math

import pytest

from accelmap.arch import get_accelerator, preset_names
from accelmap.arch.presets import preset_path
from accelmap.cost.model import evaluate
from accelmap.mapping import Loop, Mapping
from accelmap.workload.constructors import gemm

KIB = 8 * 1024
EXPECTED = {"eyeriss_like", "simba_like", "tpu_like", "edge_tpu_like", "ascend_like", "vta_like",
            "vta_8x8x8", "diana_like", "aie_like"}


def test_all_expected_presets_are_bundled():
    assert EXPECTED <= set(preset_names())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preset_file_cites_its_sources(name):
    text = preset_path(name).read_text()
    assert text.startswith("#"), "a preset opens with the sources of its numbers"
    assert get_accelerator(name).name == name


@pytest.mark.parametrize("name,pes,levels", [
    ("eyeriss_like", 168, ["DRAM", "GLB", "RF"]),
    ("simba_like", 1024, ["DRAM", "GLB", "PEInBuf", "PEWBuf", "PEAccBuf"]),
    ("tpu_like", 1024, ["DRAM", "UB", "PEReg"]),
    ("edge_tpu_like", 1024, ["DRAM", "ActMem", "WMem", "OReg", "WReg"]),
    ("ascend_like", 4096, ["DRAM", "L1", "UB", "L0C", "L0A", "L0B"]),
    ("vta_like", 256, ["DRAM", "SRAM"]),
    ("vta_8x8x8", 512, ["DRAM", "SRAM"]),
    ("diana_like", 256, ["L3", "ActMem", "WMem", "PEReg"]),
    ("aie_like", 32, ["DataMem", "AccReg", "VRF"]),
])
def test_preset_shape(name, pes, levels):
    a = get_accelerator(name)
    assert a.num_pes == pes
    assert [lv.name for lv in a.levels] == levels


def test_facts_from_the_seeds():
    asc = get_accelerator("ascend_like")
    assert asc.level("L1").capacity_bits == 1024 * KIB
    assert asc.level("UB").capacity_bits == 256 * KIB
    assert asc.level("L0A").capacity_bits == asc.level("L0B").capacity_bits == 64 * KIB
    assert asc.level("L0C").capacity_bits == 256 * KIB
    assert all(lv.double_buffered for lv in asc.levels[1:])
    assert [(x.name, x.size, x.reduce) for x in asc.level("L0B").fanout.axes] == [
        ("X", 16, False), ("Y", 16, False), ("Z", 16, True)]
    assert asc.compute.supported_bits("I") == (16,)

    d = get_accelerator("diana_like")
    assert d.level("ActMem").capacity_bits == 256 * KIB
    assert d.level("WMem").capacity_bits == 64 * KIB
    assert d.level("L3").capacity_bits == 512 * KIB
    assert [(x.name, x.size) for x in d.level("WMem").fanout.axes] == [("OX", 16), ("K", 16)]

    e = get_accelerator("eyeriss_like")
    assert e.level("GLB").capacity_bits == 108 * KIB
    assert dict(e.level("RF").partitions) == {"I": 12 * 16, "W": 224 * 16, "O": 24 * 16}

    v = get_accelerator("vta_like")
    assert dict(v.level("SRAM").partitions) == {"I": 128 * KIB, "W": 256 * KIB, "O": 128 * KIB}
    v8 = get_accelerator("vta_8x8x8")
    assert [x.size for x in v8.level("SRAM").fanout.axes] == [8, 8, 8]
    assert dict(v8.level("SRAM").partitions) == dict(v.level("SRAM").partitions)

    aie = get_accelerator("aie_like")
    assert aie.level("DataMem").capacity_bits == 128 * KIB
    assert aie.level("VRF").capacity_bits == 256 * 8
    assert aie.level("DataMem").read_bw_bits + aie.level("DataMem").write_bw_bits == 96 * 8
    assert aie.peak_macs_per_cycle == 32

    t = get_accelerator("tpu_like")
    assert [x.size for x in t.level("UB").fanout.axes] == [32, 32]


def _bits(a):
    return {c: a.compute.supported_bits(c)[0] for c in "IWO"}


def _keep_all(a, op):
    return tuple(frozenset(o.name for o in op.operands if o.cls in lv.holds) for lv in a.levels)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_all_temporal_at_top_evaluates(name):
    a = get_accelerator(name)
    op = gemm("g", m=4, n=6, k=5, bits=_bits(a))
    m = Mapping(tuple(Loop(d, s, 0) for d, s in op.dims), _keep_all(a, op))
    r = evaluate(op, a, m)
    assert r.macs == 120 and r.mac_slots == 120
    assert r.energy_total > 0 and r.latency >= 120
    assert r.spatial_utilization == pytest.approx(1 / a.num_pes)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fanout_filled_evaluates(name):
    """Each axis gets a dim it may carry (reductions only on reducing axes), filled to its size."""
    a = get_accelerator(name)
    spatial, per_dim, flip = [], {"M": 1, "N": 1, "K": 1}, 0
    for i, lv in enumerate(a.levels):
        for ax in (lv.fanout.axes if lv.fanout else ()):
            if ax.reduce:
                d = "K"
            else:
                d, flip = ("M", "N")[flip], 1 - flip
            spatial.append(Loop(d, ax.size, i, ax.name))
            per_dim[d] *= ax.size
    op = gemm("g", m=2 * per_dim["M"], n=2 * per_dim["N"], k=2 * per_dim["K"], bits=_bits(a))
    loops = [Loop(d, 2, 0) for d in ("M", "N", "K")]
    # Spatial loops follow the temporal loops of their level; level 0's come first.
    loops = loops + spatial
    loops.sort(key=lambda l: (l.level, l.spatial))
    r = evaluate(op, a, Mapping(tuple(loops), _keep_all(a, op)))
    assert r.macs == op.macs == 8 * a.num_pes
    assert r.spatial_utilization == 1.0
    assert r.compute_cycles == 8
    assert math.isfinite(r.energy_total) and r.energy_total > r.macs * a.compute.mac_energy_pj


def test_arch_list_names_every_preset_with_pes_and_levels():
    from click.testing import CliRunner
    from accelmap.cli import main
    r = CliRunner().invoke(main, ["arch", "list"])
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line.split()[1:3] for line in r.output.splitlines()[1:]}
    assert set(rows) == set(preset_names())
    assert rows["ascend_like"] == ["4096", "DRAM"]
    assert "DRAM > GLB > RF" in r.output


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_arch_show_text_and_png(name, tmp_path):
    from click.testing import CliRunner
    from accelmap.cli import main
    a = get_accelerator(name)
    png = tmp_path / f"{name}.png"
    r = CliRunner().invoke(main, ["arch", "show", name, "--png", str(png)])
    assert r.exit_code == 0, r.output
    for lv in a.levels:
        assert f"+-- {lv.name} (x{lv.instances}) " in r.output
        if lv.fanout:
            assert f"fan-out x{lv.fanout.size}: " in r.output
    assert f"[ MAC x{a.num_pes}:" in r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
