"""The latency's parts add up to it, in the model and in what ``accelmap evaluate`` prints."""

from __future__ import annotations

import random
import re

from click.testing import CliRunner

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator, preset_names
from accelmap.cli import main
from accelmap.cost.model import evaluate, rounded_parts
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping
from accelmap.workload import conv2d, gemm


def test_latency_parts_sum_to_the_latency_on_every_preset():
    rng = random.Random(7)
    ops = [conv2d("c", c=8, h=10, w=10, k=16, r=3, s=3, padding=1), gemm("g", m=16, n=32, k=24),
           conv2d("d", c=4, h=9, w=9, k=8, r=3, s=3, stride=2)]
    checked, named = 0, set()
    for name in preset_names():
        arch = get_accelerator(name)
        for op0 in ops:
            op = adopt_precision(op0, arch)
            for i in range(8):
                try:
                    m = random_mapping(op, arch, rng, imperfect=bool(i % 2))
                    r = evaluate(op, arch, m)
                except MappingError:
                    continue
                checked += 1
                values = [v for _, v in r.latency_parts]
                assert abs(sum(values) - r.latency) <= 1e-9 * r.latency
                assert min(values) >= -1e-9 * r.latency
                assert dict(r.latency_parts)["MAC schedule"] == r.compute_cycles
                # Every transfer unit fits its own work within the latency.
                assert r.latency >= max(r.transfer_cycles.values()) * (1 - 1e-12)
                assert sum(v for _, v in rounded_parts(r.latency_parts)) == round(r.latency)
                named |= {n for n, v in r.latency_parts if v > 0}
    assert checked >= 120
    # The mappings exercise most terms: stalls, double-buffer edges, pipelines, streaming.
    assert {"MAC schedule", "single-buffer stalls", "prologue and epilogue", "pipeline overheads"} <= named


def test_the_printed_breakdown_adds_up_to_the_printed_latency():
    for arch in ("eyeriss_like", "tpu_like", "vta_like"):
        r = CliRunner().invoke(main, ["evaluate", "--arch", arch])
        assert r.exit_code == 0, r.output
        line = next(ln for ln in r.output.splitlines() if ln.startswith("latency "))
        total, rest = re.fullmatch(r"latency ([\d,]+) cycles = (.*)", line).groups()
        parts = [int(p.rsplit(" ", 1)[1].replace(",", "")) for p in rest.split(" + ")]
        assert sum(parts) == int(total.replace(",", "")), line
