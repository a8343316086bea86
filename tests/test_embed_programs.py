"""Executed intrinsic programs equal the reference operator exactly (int8 x int8 -> int32)."""

import numpy as np
import pytest

from accelmap.arch.intrinsics import get_intrinsic
from accelmap.embed.integer_inputs import random_inputs
from accelmap.embed.program import verify_program
from accelmap.embed.search import embed
from accelmap.workload.constructors import batched_matmul, conv2d, dense, depthwise_conv2d
from accelmap.workload.numpy_reference import reference
from accelmap.workload.text_form import parse_expression

OPS = {
    "conv": conv2d("conv", c=3, h=9, w=8, k=20, r=3, s=3, padding=1),
    "dilated": conv2d("dil", c=5, h=11, w=10, k=17, r=3, s=3, dilation=2),
    "strided": conv2d("str", c=4, h=11, w=9, k=18, r=3, s=2, stride=2, padding=(1, 0)),
    "padded_asym": conv2d("pad", c=2, h=7, w=6, k=16, r=2, s=3, padding=(0, 1, 2, 1)),
    "grouped": conv2d("grp", c=8, h=6, w=6, k=12, r=3, s=3, groups=2, padding=1),
    "batched": conv2d("bat", n=3, c=6, h=5, w=5, k=9, r=3, s=3),
    "depthwise": depthwise_conv2d("dw", c=6, h=7, w=7, r=3, s=3, padding=1),
    "dense": dense("fc", n=5, c=37, k=19),
    "bmm": batched_matmul("bmm", batch=3, m=7, n=9, k=20),
}


def test_reference_matches_naive_loops():
    op = conv2d("c", n=2, c=3, h=7, w=6, k=4, r=3, s=2, stride=(2, 1), dilation=(1, 2), padding=(1, 2, 0, 1))
    x = random_inputs(op, 3)
    got = reference(op, x)
    pt, pl = 1, 2
    I, W = x["I"], x["W"]
    want = np.zeros_like(got)
    for n, k, p, q, c, r, s in np.ndindex(2, 4, got.shape[2], got.shape[3], 3, 3, 2):
        h, w = 2 * p + r - pt, q + 2 * s - pl
        if 0 <= h < 7 and 0 <= w < 6:
            want[n, k, p, q] += I[n, c, h, w] * W[k, c, r, s]
    assert np.array_equal(got, want)


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("intr", ["vta_gemm", "vta_gemm_8x8x8", "gemv_16x16", "dot_16", "simd2d_16x2"])
def test_strict_and_relaxed_programs_are_exact(name, intr):
    op = OPS[name]
    it = get_intrinsic(intr)
    res = embed(op, it, "relaxed", processes=1, per_asset=2, max_assets=3, time_limit=20)
    if name == "depthwise" and intr == "vta_gemm_8x8x8":
        # Every output channel reads its own input channel, so no operator dim can sit on the
        # GEMM's x axis (in a, not in b) once y holds a pixel dim: a real "no embedding".
        assert not res.found and "dw has no such dimension" in res.reason
        return
    assert res.found, res.summary()
    # The best few and a spread of the rest: every rule combination the search produced.
    picks = res.embeddings[:2] + res.embeddings[2::max(1, len(res.embeddings) // 3)]
    for e in picks:
        ok, msg = verify_program(e.program, seed=1)
        assert ok, f"{e.solution}: {msg}"


def test_relaxed_finds_im2col_image_pack_and_fused_solutions():
    op = conv2d("low", c=1, h=20, w=18, k=16, r=5, s=3, stride=2)
    res = embed(op, get_intrinsic("vta_gemm"), "relaxed", processes=1)
    rules = {r for e in res.embeddings for r in e.program.rules}
    assert {"stencil unroll (im2col)", "fuse"} <= rules
    assert rules & {"image pack", "dilate pack"}
    fused = [e for e in res.embeddings if any(len(ps) > 1 for _, ps in e.solution.axes)]
    assert fused
    # Low channel count: the best relaxed embedding needs fewer calls than padding C to 16.
    strict = embed(op, get_intrinsic("vta_gemm"), "strict", processes=1).embeddings[0]
    assert res.embeddings[0].costs.calls < strict.costs.calls
    for e in [res.embeddings[0]] + [e for e in res.embeddings if "pack" in " ".join(e.program.rules)][:2]:
        assert verify_program(e.program)[0]


def test_dilated_conv_gets_dilate_pack():
    op = conv2d("d", c=2, h=12, w=12, k=16, r=3, s=3, dilation=2)
    res = embed(op, get_intrinsic("vta_gemm"), "relaxed", processes=1)
    # Pixel dims on the intrinsic with the dilated kernel outside: the packs of Table 4.1, rule 1.
    packs = [e for e in res.embeddings if {"dilate pack", "image pack"} & set(e.program.rules)]
    assert packs
    assert verify_program(packs[0].program)[0]


def test_text_form_operator_and_wide_intrinsic_accumulator():
    op = parse_expression("O[m,n] += A[m,k] * B[n,k]", {"m": 5, "n": 33, "k": 7}, bits={"A": 16, "B": 16, "O": 48})
    res = embed(op, get_intrinsic("simd2d_16x2"), "strict", processes=1)
    assert not res.found or verify_program(res.embeddings[0].program)[0]
    res = embed(op, get_intrinsic("simd2d_16x2"), "relaxed", processes=1)
    assert res.found and verify_program(res.embeddings[0].program)[0]


def test_rewrites_round_trip_through_their_inverses():
    op = OPS["strided"]
    res = embed(op, get_intrinsic("vta_gemm"), "relaxed", processes=1, per_asset=3)
    x = random_inputs(op, 5)
    seen = 0
    for e in res.embeddings:
        lay = e.program.layout("O")
        arr = np.arange(np.prod(lay.stored)).reshape(lay.stored)
        from accelmap.embed.program import transform, untransform
        assert np.array_equal(untransform(lay, transform(lay, arr)), arr)
        ilay = e.program.layout("I")
        if any(r.kind == "unroll" for r in ilay.rewrites):
            back = untransform(ilay, transform(ilay, x["I"]))
            # Unrolled stencils scatter back every element some window reads.
            assert np.array_equal(back[back != 0], x["I"][back != 0])
            seen += 1
    assert res.embeddings
