"""Timeloop-style mapping YAML: exact text on known mappings, and what Timeloop cannot express."""

import pytest
import yaml

from accelmap.arch import get_accelerator
from accelmap.errors import MappingError
from accelmap.mapping import Loop, Mapping, mapping_from_yaml, validate
from accelmap.mapping.timeloop_export import timeloop_directives, timeloop_yaml
from accelmap.workload.constructors import conv2d, gemm

EYERISS_MAPPING = {"mapping": [
    {"level": "DRAM", "keep": ["O", "I", "W"], "temporal": [["K", 2], ["C", 2]]},
    {"level": "GLB", "keep": ["O", "I"], "temporal": [["C", 2], ["R", 3], ["Q", 14]],
     "spatial": [["P", 14, "X"], ["K", 4, "Y"]]},
    {"level": "RF", "keep": ["O", "I", "W"], "temporal": [["K", 4], ["C", 4], ["S", 3]]},
]}

EXPECTED = """\
# conv on eyeriss_like, exported by accelmap
mapping:
  - target: DRAM
    type: temporal
    factors: N=1 K=2 C=2 P=1 Q=1 R=1 S=1
    permutation: CKNPQRS
  - target: DRAM
    type: bypass
    keep: [Outputs, Inputs, Weights]
    bypass: []
  - target: GLB
    type: temporal
    factors: N=1 K=1 C=2 P=1 Q=14 R=3 S=1
    permutation: QRCNKPS
  - target: GLB
    type: spatial
    factors: N=1 K=4 C=1 P=14 Q=1 R=1 S=1
    permutation: PKNCQRS
    split: 1
  - target: GLB
    type: bypass
    keep: [Outputs, Inputs]
    bypass: [Weights]
  - target: RF
    type: temporal
    factors: N=1 K=4 C=4 P=1 Q=1 R=1 S=3
    permutation: SCKNPQR
  - target: RF
    type: bypass
    keep: [Outputs, Inputs, Weights]
    bypass: []
"""

NAMES = {"I": "Inputs", "W": "Weights", "O": "Outputs"}


def _conv():
    return conv2d("conv", c=16, h=14, w=14, k=32, r=3, s=3, padding=1, bits={"I": 16, "W": 16, "O": 16})


def test_eyeriss_row_stationary_exact_yaml():
    arch = get_accelerator("eyeriss_like")
    op = _conv()
    m = mapping_from_yaml(EYERISS_MAPPING, arch)
    validate(op, arch, m)
    text = timeloop_yaml(op, arch, m, names=NAMES)
    assert text == EXPECTED
    # It is YAML, and factors multiply back to the problem size.
    entries = yaml.safe_load(text)["mapping"]
    prod = {d: 1 for d in op.dim_names}
    for e in entries:
        if e["type"] != "bypass":
            for kv in e["factors"].split():
                d, v = kv.split("=")
                prod[d] *= int(v)
    assert prod == dict(op.dims)


def test_adjacent_loops_of_one_dim_merge_and_three_axes_go_x_then_y():
    arch = get_accelerator("vta_8x8x8")
    op = gemm("g", m=8, n=16, k=32)
    loops = (Loop("N", 2, 0), Loop("K", 2, 0), Loop("K", 2, 0),
             Loop("M", 8, 1, "X"), Loop("N", 8, 1, "Y"), Loop("K", 8, 1, "Z"))
    m = Mapping(loops, (frozenset("OAB"), frozenset("OAB")))
    validate(op, arch, m)
    d = timeloop_directives(op, arch, m)
    assert d[0] == {"target": "DRAM", "type": "temporal", "factors": "M=1 N=2 K=4", "permutation": "KNM"}
    assert d[3] == {"target": "SRAM", "type": "spatial", "factors": "M=8 N=8 K=8", "permutation": "MKN", "split": 1}
    assert d[4] == {"target": "SRAM", "type": "bypass", "keep": ["O", "A", "B"], "bypass": []}


def test_loops_of_one_dim_split_by_another_are_rejected():
    arch = get_accelerator("vta_like")
    op = gemm("g", m=4, n=16, k=16)
    m = Mapping((Loop("M", 2, 0), Loop("N", 1, 0), Loop("M", 2, 0), Loop("N", 16, 1, "Y"), Loop("K", 16, 1, "Z")),
                (frozenset("OAB"), frozenset("OAB")))
    with pytest.raises(MappingError, match="dimension M has two loops separated by others"):
        timeloop_directives(op, arch, m)


def test_one_dim_on_x_and_y_is_rejected():
    arch = get_accelerator("eyeriss_like")
    op = gemm("g", m=4, n=4, k=168, bits={"I": 16, "W": 16, "O": 16})
    m = Mapping((Loop("M", 4, 0), Loop("N", 4, 0), Loop("K", 14, 1, "X"), Loop("K", 12, 1, "Y")),
                (frozenset("OAB"), frozenset("OA"), frozenset()))
    with pytest.raises(MappingError, match="dimension K is on fan-out axis X"):
        timeloop_directives(op, arch, m)


def _files(tmp_path):
    wl = tmp_path / "conv.yaml"
    wl.write_text("name: conv\nconv2d: {c: 16, h: 14, w: 14, k: 32, r: 3, s: 3, padding: 1}\n"
                  "precision: {I: 16, W: 16, O: 16}\n")
    mp = tmp_path / "m.yaml"
    mp.write_text(yaml.safe_dump(EYERISS_MAPPING))
    return str(wl), str(mp)


def _export(*args):
    from click.testing import CliRunner

    from accelmap.cli import main
    return CliRunner().invoke(main, ["export-timeloop", *map(str, args)])


def test_the_command_prints_the_mapping_with_timeloop_data_space_names(tmp_path):
    wl, mp = _files(tmp_path)
    r = _export("--workload", wl, "--arch", "eyeriss_like", "--mapping", mp)
    assert r.exit_code == 0, r.output
    assert r.stdout == EXPECTED
    ours = _export("--workload", wl, "--arch", "eyeriss_like", "--mapping", mp, "--our-names")
    assert "keep: [O, I, W]" in ours.stdout and "Inputs" not in ours.stdout


def test_the_command_writes_mapping_and_problem_with_renamed_dims(tmp_path):
    wl, mp = _files(tmp_path)
    out, prob = tmp_path / "tl" / "mapping.yaml", tmp_path / "tl" / "problem.yaml"
    out.parent.mkdir()
    r = _export("-w", wl, "-a", "eyeriss_like", "-m", mp, "-o", out, "--problem", prob, "--rename", "K=M")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [f"wrote {out}", f"wrote {prob}"]
    renamed = [ln.replace("K", "M") if ln.startswith(("    factors:", "    permutation:")) else ln
               for ln in EXPECTED.splitlines()]
    assert out.read_text().splitlines() == renamed
    problem = yaml.safe_load(prob.read_text())["problem"]
    assert problem["instance"] == {"N": 1, "M": 32, "C": 16, "P": 14, "Q": 14, "R": 3, "S": 3}
    assert problem["shape"]["dimensions"] == ["N", "M", "C", "P", "Q", "R", "S"]
    spaces = {s["name"]: s for s in problem["shape"]["data-spaces"]}
    assert list(spaces) == ["Inputs", "Weights", "Outputs"] and spaces["Outputs"]["read-write"] is True
    assert spaces["Inputs"]["projection"] == [[["N"]], [["C"]], [["P"], ["R"]], [["Q"], ["S"]]]
    assert spaces["Weights"]["projection"] == [[["M"]], [["C"]], [["R"]], [["S"]]]


def test_problem_projection_declares_strides_and_dilations_as_coefficients():
    from accelmap.mapping.timeloop_export import timeloop_names, timeloop_problem

    op = conv2d("c", c=3, h=15, w=15, k=4, r=3, s=3, stride=2, dilation=(1, 3))
    shape = timeloop_problem(op, timeloop_names(op))["problem"]["shape"]
    coef = {c["name"]: c["default"] for c in shape["coefficients"]}
    inputs = next(s for s in shape["data-spaces"] if s["name"] == "Inputs")
    # Every axis reads back as our affine index: sum of coefficient x dim.
    for axis, ix in zip(inputs["projection"], op.operand("I").indices, strict=True):
        assert [(t[0], coef[t[1]] if len(t) > 1 else 1) for t in axis] == list(ix.terms)
    assert coef == {"coef2": 2, "coef3": 3}


def test_bad_renames_and_unexportable_mappings_are_one_line(tmp_path):
    wl, mp = _files(tmp_path)
    for args, msg in ((["--rename", "Z=M"], "--rename: cannot rename Z: conv has operands O, I, W"),
                      (["--rename", "K=C"], "--rename: after renaming, C names two operands or dimensions"),
                      (["--rename", "K"], "--rename: 'K' is not OURS=THEIRS"),
                      (["-o", tmp_path / "x.yaml", "--problem", tmp_path / "x.yaml"], "is the same file as --output")):
        r = _export("-w", wl, "-a", "eyeriss_like", "-m", mp, *args)
        assert r.exit_code == 2 and len(r.output.splitlines()) == 1 and msg in r.output, r.output
    assert not (tmp_path / "x.yaml").exists()
