"""A level that holds the output only as finished values stores it at ``final_output_bits`` (ZigZag's O_final
sizing, which lets ZigZag's ResNet-18 conv1 mapping on ascend_like keep the whole output in its 1 MB SRAM)."""

import pytest

from accelmap.arch import accelerator_from_dict
from accelmap.errors import MappingError
from accelmap.mapping import Loop, Mapping
from accelmap.mapping.validate import capacity_usage, check_capacity, finished_output_levels
from accelmap.workload import parse_expression

OP = parse_expression("O[m,n] += I[m,k] * W[k,n]", dict(m=4, n=4, k=8), bits=dict(O=32, I=8, W=8))
KEEP = (frozenset("OIW"), frozenset("O"), frozenset("O"))


def _arch(final_bits: int | None = 8, fanout_above_buf: bool = False):
    fan = {"fanout": {"axes": [{"name": "X", "size": 2, "reduce": True}]}}
    compute = {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 32}}
    if final_bits is not None:
        compute["final_output_bits"] = final_bits
    return accelerator_from_dict({
        "name": "finished_toy", "compute": compute,
        "levels": [
            {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "32 bit",
             **(fan if fanout_above_buf else {})},
            # 16 outputs at 8 bits, exactly; at 32 bits they need 512
            {"name": "BUF", "holds": ["O"], "capacity": "128 bit", "width": "32 bit",
             **({} if fanout_above_buf else fan)},
            {"name": "ACC", "holds": ["O"], "capacity": "32 bit", "width": "32 bit"}]})


def test_a_level_above_the_accumulating_one_stores_finished_outputs_at_the_final_precision():
    arch = _arch()
    m = Mapping((Loop("m", 4, 1), Loop("n", 4, 1), Loop("k", 8, 2)), KEEP)   # k accumulates inside ACC
    assert finished_output_levels(OP, arch, m) == (True, True, False)        # ACC accumulates: partial sums
    use = capacity_usage(OP, arch, m)
    assert use[1]["O"] == 16 * 8 and use[2]["O"] == 32 and use[0]["O"] == 16 * 8
    check_capacity(OP, arch, m)


def test_without_final_output_bits_the_same_mapping_does_not_fit():
    m = Mapping((Loop("m", 4, 1), Loop("n", 4, 1), Loop("k", 8, 2)), KEEP)
    assert finished_output_levels(OP, _arch(None), m) == (False, False, False)
    with pytest.raises(MappingError, match="capacity exceeded at BUF: needs 512 bits"):
        check_capacity(OP, _arch(None), m)


def test_a_reduction_loop_at_the_level_or_above_it_keeps_partial_sums_there():
    arch = _arch()
    at_buf = Mapping((Loop("m", 4, 1), Loop("n", 4, 1), Loop("k", 8, 1)), KEEP)
    assert finished_output_levels(OP, arch, at_buf) == (True, False, False)
    with pytest.raises(MappingError, match="capacity exceeded at BUF: needs 512 bits"):
        check_capacity(OP, arch, at_buf)
    above = Mapping((Loop("k", 2, 0), Loop("m", 4, 1), Loop("n", 4, 1), Loop("k", 4, 2)), KEEP)
    assert finished_output_levels(OP, arch, above) == (False, False, False)


def test_a_spatial_reduction_is_finished_below_its_fan_out_only():
    # k2 reduced in BUF's fan-out: BUF receives finished sums
    below = Mapping((Loop("m", 4, 1), Loop("n", 4, 1), Loop("k", 2, 1, "X"), Loop("k", 4, 2)), KEEP)
    assert finished_output_levels(OP, _arch(), below) == (True, True, False)
    check_capacity(OP, _arch(), below)
    # k2 across two instances of BUF: each holds its branch's partial sums
    across = Mapping((Loop("k", 2, 0, "X"), Loop("m", 4, 1), Loop("n", 4, 1), Loop("k", 4, 2)), KEEP)
    arch = _arch(fanout_above_buf=True)
    assert finished_output_levels(OP, arch, across) == (True, False, False)
    with pytest.raises(MappingError, match="capacity exceeded at BUF"):
        check_capacity(OP, arch, across)
