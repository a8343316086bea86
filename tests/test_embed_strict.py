"""Strict mode reproduces TVM's VTA strategy; the CSP pieces behave as seed 000 describes."""

from accelmap.arch.intrinsics import get_intrinsic
from accelmap.arch.presets import get_accelerator
from accelmap.embed.csp import Piece, is_hyper_rectangle
from accelmap.embed.dataflow import dataflow, overlap_kind
from accelmap.embed.search import embed
from accelmap.workload.constructors import conv2d


def axes(e):
    return {a: tuple(ps) for a, ps in e.solution.axes}


def test_strict_vta_is_tvm_nchw_mapping():
    op = conv2d("c", n=1, c=3, h=16, w=16, k=64, r=3, s=3, padding=1)
    res = embed(op, get_intrinsic("vta_gemm"), "strict", arch=get_accelerator("vta_like"))
    assert len(res.embeddings) == 1
    e = res.embeddings[0]
    assert axes(e) == {"x": (), "y": (Piece("K", 16, 1),), "z": (Piece("C", 16, 1),)}
    assert dict(e.solution.roles) == {"a": "I", "b": "W", "c": "O"}
    # ic=3 padded to 16: 3/16 of the issued MACs are useful.
    assert e.costs.calls == 4 * 16 * 16 * 9
    assert abs(e.costs.utilization - 3 / 16) < 1e-12
    assert e.costs.latency is not None


def test_strict_8x8x8_pads_the_batch():
    op = conv2d("c", n=1, c=32, h=8, w=8, k=64, r=3, s=3, padding=1)
    e = embed(op, get_intrinsic("vta_gemm_8x8x8"), "strict").embeddings[0]
    assert axes(e) == {"x": (Piece("N", 8, 1),), "y": (Piece("K", 8, 1),), "z": (Piece("C", 8, 1),)}


def test_overlap_sets_follow_def_4_6():
    op = conv2d("c", c=4, h=10, w=10, k=8, r=3, s=3)
    df = dataflow(op)
    o = (0, 0, 0, 0)
    assert overlap_kind(df, "I", o, (0, 1, 0, 0)) == "full"      # next output channel: same window
    assert overlap_kind(df, "W", o, (0, 1, 0, 0)) == "none"
    assert overlap_kind(df, "I", o, (0, 0, 0, 1)) == "partial"   # neighbouring pixel: the stencil overlaps
    assert overlap_kind(df, "I", o, (0, 0, 0, 3)) == "none"
    assert df.size() == (5, 6)                                   # fixed, whatever the tensor sizes
    big = dataflow(conv2d("c", c=400, h=1000, w=1000, k=800, r=3, s=3))
    assert big.size() == df.size()


def test_hyper_rectangle_algorithm():
    assert is_hyper_rectangle([(0, 0), (0, 2), (1, 0), (1, 2), (2, 0), (2, 2)])
    assert not is_hyper_rectangle([(0, 0), (0, 1), (1, 1), (1, 0)])
    assert not is_hyper_rectangle([(0, 0), (1, 1)])
    assert is_hyper_rectangle([(0, 0, 0), (0, 0, 3), (0, 5, 0), (0, 5, 3)])
    assert not is_hyper_rectangle([(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)])


def test_exact_integers_beyond_32_bits():
    # Tensor boxes beyond 2**31 elements: the search and the isl sets stay exact.
    op = conv2d("huge", n=64, c=2048, h=1024, w=1024, k=2048, r=3, s=3, padding=1)
    res = embed(op, get_intrinsic("vta_gemm"), "strict")
    e = res.embeddings[0]
    assert e.costs.calls == 64 * 128 * 1024 * 1024 * 128 * 9
    assert e.costs.calls > 2 ** 40


def test_mapper_recosts_the_best_embeddings_without_reordering_the_rest():
    arch = get_accelerator("vta_like")
    op = conv2d("c", c=3, h=10, w=10, k=32, r=3, s=3, padding=1)
    plain = embed(op, get_intrinsic("vta_gemm"), "relaxed", arch=arch, processes=1, max_assets=4)
    res = embed(op, get_intrinsic("vta_gemm"), "relaxed", arch=arch, processes=1, max_assets=4, mapper_top=2)
    mapped = [e for e in res.embeddings if e.costs.mapped_latency is not None]
    assert len(mapped) == 2 and res.embeddings[:2] == mapped
    for e in mapped:
        # The mapper keeps the better of its own loop nest and the built one.
        assert e.costs.mapped_latency <= e.costs.latency and e.costs.operator_cost == e.costs.mapped_latency
    assert [str(e.solution) for e in res.embeddings[2:]] == [str(e.solution) for e in plain.embeddings[2:]]
    costs = [e.costs.operator_cost for e in res.embeddings]
    assert costs == sorted(costs)
