"""The embedding search finds exactly what it found before its speed work, in the same order.

The fixture holds, for a sample of DeepBench layers, Table 4.2/4.6 layers and other operators,
every solution and the expanded-node count of the search as it was before it was sped up
(array-form candidate check, memoized overlaps, iterative row moves): speed must not cost
solutions, and the node counts show the same tree was walked.
"""

import json
from pathlib import Path

import pytest

from accelmap.arch.intrinsics import get_intrinsic
from accelmap.embed.search import embed
from accelmap.workload.constructors import conv2d, depthwise_conv2d

BASELINE = json.loads((Path(__file__).parent / "test_embed_baseline.json").read_text())

# The operators of benchmarks/embedding.py, by the names the fixture uses.
DEEPBENCH = {  # index: (n, c, h, w, k, filter_h, filter_w, pad_h, pad_w, stride_h, stride_w)
    0: (1, 1, 161, 700, 32, 5, 20, 0, 0, 2, 2),
    5: (4, 32, 79, 341, 32, 5, 10, 0, 0, 2, 2),
    15: (1, 3, 224, 224, 64, 3, 3, 1, 1, 1, 1),
    19: (1, 512, 14, 14, 512, 3, 3, 1, 1, 1, 1),
    57: (2, 512, 7, 7, 512, 1, 1, 0, 0, 1, 1),
    73: (2, 256, 20, 84, 512, 5, 5, 1, 1, 2, 2),
}


def _case(name):
    if name.startswith("db"):
        n, c, h, w, k, fh, fw, ph, pw, sh, sw = DEEPBENCH[int(name[2:])]
        return conv2d(name, n=n, c=c, h=h, w=w, k=k, r=fh, s=fw, stride=(sh, sw), padding=(ph, pw)), "vta_gemm"
    if name == "t42_13":
        return conv2d("t", n=1, c=304, h=18, w=18, k=448, r=3, s=3, padding=0, stride=1, dilation=2), "vta_gemm"
    if name == "t46_7":
        return conv2d("t", n=1, c=72, h=56, w=56, k=96, r=1, s=1, padding=0, stride=1), "vta_gemm_8x8x8"
    if name == "grouped_simd2d_16x2":
        return conv2d("grouped", c=32, h=8, w=8, k=64, r=3, s=3, groups=4, padding=1), "simd2d_16x2"
    dw = depthwise_conv2d("dw", c=32, h=10, w=10, r=3, s=3, padding=1)
    return dw, name[len("depthwise_"):]


@pytest.mark.parametrize("name", sorted(k for k in BASELINE if not k.startswith("_")))
def test_search_finds_the_baseline_solutions(name):
    op, intr = _case(name)
    for mode, want in BASELINE[name].items():
        res = embed(op, get_intrinsic(intr), mode, processes=1, build=False)
        assert not res.stats.timed_out
        assert [f"{s} {s.search}" for s in res.solutions] == want["solutions"], mode
        if res.stats.assets == 0:
            # Proven empty before searching (an intrinsic axis no dim can fill): the search found nothing.
            assert not want["solutions"] and "has no such dimension" in res.reason
        else:
            assert res.stats.expanded == want["expanded"], mode
