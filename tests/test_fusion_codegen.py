"""Emitted C of a fused group: bit-exact against NumPy, its counters equal to the model's, and no read
of anything its halo policy has evicted."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from accelmap.codegen.fused_c import run_fused
from accelmap.fusion.geometry import MODES, fused_counts
from accelmap.fusion.stages import mac_stage, pool_stage
from accelmap.workload import conv2d


def random_group(rng: random.Random):
    h, w, c = rng.randint(5, 10), rng.randint(5, 10), rng.randint(1, 3)
    stages, macs = [], {}
    for i in range(rng.randint(2, 3)):
        if i and rng.random() < 0.35 and h >= 4 and w >= 4:
            p = pool_stage(f"pool{i}", channels=c, in_rows=h, in_cols=w, kernel=(2, 2), stride=(2, 2),
                           pads=(0, 0, 0, 0), bits=16)
            stages.append(p)
            h, w = p.out_rows, p.out_cols
        r, s = rng.randint(1, min(3, h)), rng.randint(1, min(3, w))
        stride = rng.choice([1, 1, 2]) if min(r, s) > 1 else 1
        dil = rng.choice([1, 1, 2]) if stride == 1 and r == 3 and s == 3 and h >= 5 and w >= 5 else 1
        k = rng.randint(1, 3)
        op = conv2d(f"c{i}", c=c, h=h, w=w, k=k, r=r, s=s, stride=stride, dilation=dil,
                    padding=rng.randint(0, 1) if r > 1 and s > 1 else 0)
        ms = mac_stage(op)
        macs[len(stages)] = ms
        stages.append(ms.stage)
        h, w, c = ms.stage.out_rows, ms.stage.out_cols, k
    return tuple(stages), macs


@settings(max_examples=15)
@given(st.integers(0, 10**9))
def test_fused_c_is_bit_exact_and_counts_what_the_model_counts(seed):
    rng = random.Random(seed)
    stages, macs = random_group(rng)
    last = stages[-1]
    ty, tx = rng.randint(1, last.out_rows), rng.randint(1, last.out_cols)
    policies = tuple(rng.choice(list(MODES)) for _ in stages)
    run, ref = run_fused(stages, macs, ty, tx, policies, seed=seed % 1000)
    assert run.invalid_reads == 0
    assert (run.output == ref).all()
    model = fused_counts(stages, ty, tx, policies)
    assert run.input_fetched == model.input_fetched
    assert run.output_written == model.output_written
    assert run.macs == model.macs
