import random

import pytest
from hypothesis import given, settings

from accelmap.arch import get_accelerator
from accelmap.errors import MappingError, SpecError
from accelmap.mapping import Loop, Mapping, format_text, mapping_from_yaml, mapping_to_yaml, parse_text, validate
from accelmap.workload import conv2d

from strategies import mapped_problems


@settings(max_examples=100)
@given(mapped_problems())
def test_text_and_yaml_round_trip(problem):
    op, arch, m = problem
    assert parse_text(format_text(m, arch, op), arch) == m
    assert mapping_from_yaml(mapping_to_yaml(m, arch), arch) == m


def _conv():
    return conv2d("c", c=16, h=14, w=14, k=32, r=3, s=3, padding=1, bits={"I": 16, "W": 16, "O": 16})


def _eyeriss_ok():
    return Mapping((Loop("K", 2, 0), Loop("C", 2, 0), Loop("C", 2, 1), Loop("R", 3, 1), Loop("Q", 14, 1),
                    Loop("P", 14, 1, "X"), Loop("K", 4, 1, "Y"), Loop("K", 4, 2), Loop("C", 4, 2), Loop("S", 3, 2)),
                   (frozenset("OIW"), frozenset("OI"), frozenset("OIW")))


def test_valid_mapping_passes():
    validate(_conv(), get_accelerator("eyeriss_like"), _eyeriss_ok())


@pytest.mark.parametrize("mutate,msg", [
    (lambda l: l[:-1], "dimension S has size 3 but its loops multiply to 1"),
    (lambda l: l[:5] + [Loop("P", 15, 1, "X")] + l[6:], "fan-out exceeded: spatial loops on axis X multiply to 15"),
    (lambda l: l + [Loop("S", 1, 2, "X")], "spatial loop S1 at level RF, which has no fan-out"),
    (lambda l: [Loop("K", 2, 1)] + l[1:], "out of order"),
    (lambda l: l[1:6] + [Loop("K", 32, 2)] + l[8:],
     r"capacity exceeded at RF, partition O \(O\): needs 512 bits \(64 B\), has 384 bits \(48 B\)"),
    (lambda l: [Loop("K", 3, 0)] + l[1:], "iterations that never touch a valid K"),
])
def test_mapping_errors(mutate, msg):
    m = _eyeriss_ok()
    bad = Mapping(tuple(mutate(list(m.loops))), m.keep)
    with pytest.raises(MappingError, match=msg):
        validate(_conv(), get_accelerator("eyeriss_like"), bad)


def test_keep_and_precision_errors():
    arch, m = get_accelerator("eyeriss_like"), _eyeriss_ok()
    with pytest.raises(MappingError, match="level GLB cannot keep W"):
        validate(_conv(), arch, Mapping(m.loops, (m.keep[0], frozenset("OIW"), m.keep[2])))
    with pytest.raises(MappingError, match="outermost level DRAM must keep every operand; "):
        validate(_conv(), arch, Mapping(m.loops, (frozenset("OI"), m.keep[1], m.keep[2])))
    op8 = conv2d("c", c=16, h=14, w=14, k=32, r=3, s=3, padding=1)
    with pytest.raises(MappingError, match="operand O is 32-bit, but eyeriss_like computes class O at 16 bits"):
        validate(op8, arch, m)


def test_spatial_reduction_must_be_complete_and_allowed():
    tpu = get_accelerator("tpu_like")
    op = conv2d("c", c=10, h=4, w=4, k=4, r=1, s=1)
    m = Mapping((Loop("C", 2, 1), Loop("P", 4, 1), Loop("Q", 4, 1), Loop("C", 6, 1, "X"), Loop("K", 4, 1, "Y")),
                (frozenset("OIW"), frozenset("OIW"), frozenset("W")))
    with pytest.raises(MappingError, match="spatial reduction over C on axis X must be complete"):
        validate(op, tpu, m)
    m2 = Mapping((Loop("P", 4, 1), Loop("Q", 4, 1), Loop("K", 4, 1, "X"), Loop("C", 10, 1, "Y")), m.keep)
    with pytest.raises(MappingError, match="axis Y cannot reduce partial sums"):
        validate(op, tpu, m2)


def test_text_parse_errors():
    arch = get_accelerator("eyeriss_like")
    with pytest.raises(SpecError, match="m.txt: line 1: unknown level 'GB'"):
        parse_text("GB [ O ]\n", arch, "m.txt")
    with pytest.raises(SpecError, match="line 2: cannot read"):
        parse_text("DRAM [ O I W ]\nfor K in 0:2\n", arch, "m.txt")
    with pytest.raises(SpecError, match="no header for levels"):
        parse_text("DRAM [ O I W ]\n", arch, "m.txt")


def test_keep_defaults_to_operand_names_not_classes(tmp_path):
    """A gemm's operands are A (class I), B (class W) and O: an entry without ``keep`` keeps those."""
    from click.testing import CliRunner

    from accelmap.cli import main
    from accelmap.cost.model import evaluate
    from accelmap.workload import gemm

    arch = get_accelerator("eyeriss_like")
    op = gemm("g", m=16, n=16, k=16, bits={"I": 16, "W": 16, "O": 16})
    data = {"mapping": [{"level": "DRAM", "temporal": [["M", 16], ["N", 16], ["K", 16]]},
                        {"level": "GLB"}, {"level": "RF"}]}
    m = mapping_from_yaml(data, arch, "m.yaml", op)
    assert m.keep == (frozenset("ABO"), frozenset("AO"), frozenset("ABO"))
    validate(op, arch, m)
    assert evaluate(op, arch, m).macs == 16 ** 3
    # A convolution's operand names are its class names: same default as before.
    assert mapping_from_yaml(data, arch, "m.yaml", _conv()).keep == (frozenset("IWO"), frozenset("IO"),
                                                                     frozenset("IWO"))
    # And through the command line.
    (tmp_path / "g.yaml").write_text("gemm: {m: 16, n: 16, k: 16}\n")
    (tmp_path / "m.yaml").write_text("mapping:\n  - level: DRAM\n    temporal: [[M, 16], [N, 16], [K, 16]]\n"
                                     "  - level: GLB\n  - level: RF\n")
    r = CliRunner().invoke(main, ["evaluate", "-w", str(tmp_path / "g.yaml"), "-m", str(tmp_path / "m.yaml"),
                                  "-a", "eyeriss_like"])
    assert r.exit_code == 0, r.output
    assert "MACs 4,096" in r.output
