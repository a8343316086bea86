"""The C form of an intrinsic program equals the NumPy execution of the same program, bit for bit."""

import ctypes

import numpy as np
import pytest

from accelmap.arch.intrinsics import get_intrinsic
from accelmap.codegen.build import compile_shared, load_run
from accelmap.codegen.intrinsic_c import generate_intrinsic_c, intrinsic_function, run_intrinsic_c
from accelmap.embed.integer_inputs import random_inputs
from accelmap.embed.program import run
from accelmap.embed.search import default_embedding, embed
from accelmap.workload.constructors import conv2d, dense
from accelmap.workload.numpy_reference import reference

SHAPES = {
    "padded": conv2d("pad", c=3, h=9, w=8, k=20, r=3, s=3, padding=1),
    "strided": conv2d("str", c=4, h=11, w=9, k=18, r=3, s=2, stride=2, padding=(1, 0)),
    "dilated": conv2d("dil", c=2, h=12, w=12, k=16, r=3, s=3, dilation=2),
    "low_channel_strided": conv2d("low", c=1, h=20, w=18, k=16, r=5, s=3, stride=2),
    "pointwise": conv2d("pw", c=24, h=5, w=6, k=20, r=1, s=1),
    "fc": dense("fc", n=3, c=37, k=19),
}


def _check(prog, seed=1):
    x = random_inputs(prog.op, seed)
    want = run(prog, x)
    got, counters = run_intrinsic_c(prog, x)
    assert got.shape == want.shape
    assert np.array_equal(got.astype(np.int64), want)
    assert np.array_equal(want, reference(prog.op, x))          # and the program computes the operator
    assert counters[0] == prog.calls
    return set(prog.rules)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_strict_vta_embedding_in_c_equals_numpy(name):
    e = default_embedding(SHAPES[name], get_intrinsic("vta_gemm"))
    assert e is not None
    _check(e.program)


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("intr", ["vta_gemm", "vta_gemm_8x8x8", "simd2d_16x2"])
def test_relaxed_embeddings_in_c_equal_numpy(name, intr):
    res = embed(SHAPES[name], get_intrinsic(intr), "relaxed", processes=1, per_asset=2, max_assets=3,
                time_limit=20)
    assert res.found, res.summary()
    # The best, and one embedding per distinct set of rewrites (im2col, image/dilate pack, fuse...).
    picks = {frozenset(e.program.rules): e for e in reversed(res.embeddings)}
    picks[frozenset(res.embeddings[0].program.rules)] = res.embeddings[0]
    for e in picks.values():
        _check(e.program)


def test_every_rewrite_of_table_4_1_runs_in_c():
    rules: set[str] = set()
    for name in ("low_channel_strided", "dilated", "padded"):
        for e in embed(SHAPES[name], get_intrinsic("vta_gemm"), "relaxed", processes=1).embeddings:
            if not set(e.program.rules) <= rules:
                rules |= _check(e.program)
    assert {"stencil unroll (im2col)", "image pack", "dilate pack", "pad", "split", "reorder", "fuse"} <= rules


def test_broadcast_pieces_are_expanded_into_the_dense_tile():
    # simd2d's lanes read both inputs; a lane axis walking a dim one input lacks broadcasts that input.
    res = embed(SHAPES["dilated"], get_intrinsic("simd2d_16x2"), "relaxed", processes=1)
    progs = [e.program for e in res.embeddings if any(L > 1 and not p for lay in e.program.layouts[1:]
                                                      for L, p in lay.pieces)]
    assert progs
    assert "broadcast to the intrinsic tile" in generate_intrinsic_c(progs[0])
    _check(progs[0])


def _call_intrinsic(name, c, a, b):
    intr = get_intrinsic(name).operator
    src = "#include <stdint.h>\n" + "\n".join(intrinsic_function(intr, "intr")) + (
        "\nint accelmap_run(void **T, long long *counters) { intr(T[0], T[1], T[2]); return 0; }\n")
    fn = load_run(compile_shared(src))
    bufs = [np.array(v, order="C") for v in (c, a, b)]      # copies: the call writes c
    ptrs = (ctypes.c_void_p * 3)(*[v.ctypes.data for v in bufs])
    fn(ptrs, None)
    return bufs[0]


def test_the_intrinsic_function_is_a_gemm_that_wraps_at_the_accumulator_width():
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (1, 16), dtype=np.int8)
    b = rng.integers(-128, 128, (16, 16), dtype=np.int8)
    c = rng.integers(-(1 << 31), 1 << 31, (1, 16), dtype=np.int64)
    c[0, :4] = [(1 << 31) - 5, -(1 << 31) + 5, (1 << 31) - 1, 0]      # near both ends of the register
    a[0, :] = 127
    b[:, :3] = [[127, -128, 127]] * 16
    got = _call_intrinsic("vta_gemm", c.astype(np.int32), a, b)
    exact = c + a.astype(np.int64) @ b.astype(np.int64)
    assert (exact[0, :3] != exact[0, :3].astype(np.int32)).all()        # these three overflow int32
    assert np.array_equal(got, ((exact + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32))


def test_a_48_bit_accumulator_wraps_at_48_bits():
    rng = np.random.default_rng(1)
    a = rng.integers(-(1 << 15), 1 << 15, (16, 2), dtype=np.int16)
    b = rng.integers(-(1 << 15), 1 << 15, (16, 2), dtype=np.int16)
    c = np.full(16, (1 << 47) - 3, dtype=np.int64)
    got = _call_intrinsic("simd2d_16x2", c, a, b)
    exact = [int(c[i]) + sum(int(a[i, k]) * int(b[i, k]) for k in range(2)) for i in range(16)]
    assert np.array_equal(got, [((v + (1 << 47)) % (1 << 48)) - (1 << 47) for v in exact])
