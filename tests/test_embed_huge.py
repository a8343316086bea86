"""``embed`` on huge dimensions honours its time limit and its memory stays bounded.

The cost of a tile a whole image away built a Python integer bit set as long as the shift (1.25 GB
for a 10^10-row image, cached, once per embedding); ``axis_overlap`` now answers disjoint and
hole-free sets in closed form.
"""

import itertools
import random
import time
import tracemalloc

from click.testing import CliRunner

from accelmap.arch import get_accelerator
from accelmap.arch.intrinsics import get_intrinsic
from accelmap.cli import main
from accelmap.embed.search import embed
from accelmap.workload import conv2d
from accelmap.workload import index_sets


def test_huge_dimension_two_second_limit_bounded_memory():
    arch = get_accelerator("vta_like")
    op = conv2d("big", c=3, h=10**10, w=10, k=64, r=3, s=3, bits={"I": 8, "W": 8, "O": 32})
    tracemalloc.start()
    # CPU seconds of this process (the search runs in it, processes=1): on 2 loaded cores the wall time also
    # counts other jobs' time slices (7.2 s wall for 3.5 s of work in one CI run).
    t0 = time.process_time()
    try:
        res = embed(op, get_intrinsic("vta_gemm", arch), "relaxed", arch=arch, time_limit=2.0, processes=1,
                    mapper_top=1)
        seconds = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.embeddings
    assert seconds < 6.0, seconds            # 2 s of search, then building and costing what it found
    assert peak < 200 * 2**20, peak          # was more than 1.3 GB


def test_cli_huge_dimension(tmp_path):
    w = tmp_path / "big.yaml"
    w.write_text("conv2d: {n: 1, c: 3, h: 100000000000000, w: 10, k: 64, r: 3, s: 3}\n")
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["embed", "-w", str(w), "--time-limit", "2", "--top", "1"])
    assert r.exit_code == 0, r.output
    assert time.monotonic() - t0 < 8.0


def _overlap_by_sets(coeffs, eo, en, sh):
    a = {sum(c * x for c, x in zip(coeffs, xs)) for xs in itertools.product(*(range(e) for e in eo))}
    off = sum(c * s for c, s in zip(coeffs, sh))
    b = {off + sum(c * x for c, x in zip(coeffs, xs)) for xs in itertools.product(*(range(e) for e in en))}
    return len(a & b)


def test_axis_overlap_closed_forms_match_the_sets():
    rng = random.Random(14)
    for _ in range(5000):
        k = rng.choice([2, 2, 3])
        coeffs = tuple(rng.randint(1, 4) for _ in range(k))
        eo = tuple(rng.randint(0, 6) for _ in range(k))
        en = tuple(rng.randint(0, 6) for _ in range(k))
        sh = tuple(rng.randint(-8, 8) for _ in range(k))
        assert index_sets.axis_overlap.__wrapped__(coeffs, eo, en, sh) == _overlap_by_sets(coeffs, eo, en, sh)
    # Far apart: answered without a bit set as long as the shift.
    assert index_sets.axis_overlap((1, 1), (1, 3), (1, 3), (-10**15, 0)) == 0
    assert index_sets.axis_overlap((1, 1), (10**12, 3), (10**12, 3), (5, 0)) == 10**12 + 2 - 5


def test_run_on_a_huge_operator_is_refused_before_the_search(tmp_path):
    w = tmp_path / "big.yaml"
    w.write_text("conv2d: {n: 1, c: 3, h: 100000000, w: 10, k: 64, r: 3, s: 3}\n")
    t0 = time.process_time()       # CPU time: refused before any search, whatever else the machine runs
    r = CliRunner().invoke(main, ["embed", "-w", str(w), "--run", "--time-limit", "30"])
    assert r.exit_code == 2 and time.process_time() - t0 < 2.0
    assert r.output.strip().splitlines() == [r.output.strip()] and "too many to execute" in r.output
