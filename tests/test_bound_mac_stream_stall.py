"""Rule B72 (docs/mapper.md): S1's single-buffer stall adds to the MACs' streaming through their last levels' ports,
not only to the MAC schedule (the model's compute is the larger of the two, and its stall adds to it). On simba_like's
ResNet-18 layer4.0.downsample the certificate's latency minimum rises from 17,952 to 22,656 cycles; its safety on
random mappings of every preset is ``test_search.test_spatial_lower_bound_never_exceeds_the_cost`` and the S1 tests
beside it, which run with the rule on."""

import math

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.search.bounds import chain_options
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import certified_lower_bound
from accelmap.workload.models import load_model


@pytest.mark.parametrize(("layer", "off", "on"), [("layer4.0.downsample", 17_952, 22_656), ("fc", 64_064, 64_375)])
def test_the_stall_on_the_streaming_raises_simba_likes_certificate(monkeypatch, layer, off, on):
    arch = get_accelerator("simba_like")
    op = adopt_precision(next(x for x in load_model("resnet18").layers if x.name == layer).operator, arch)
    chains = chain_options(op, keep_options(op, arch, Constraints()))
    with_rule = certified_lower_bound(op, arch, Constraints(), chains, "edp")
    monkeypatch.setattr("accelmap.search.bounds.MAC_STREAM_STALL", False)
    without = certified_lower_bound(op, arch, Constraints(), chains, "edp")
    assert math.isclose(without[2], off) and math.isclose(with_rule[2], on)
    assert with_rule[0] > without[0] and with_rule[1] == without[1]
