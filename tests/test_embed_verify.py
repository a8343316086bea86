"""The array-form candidate check and the memoized overlap kinds agree with their point-by-point definitions."""

import itertools
import random

import numpy as np

from accelmap.arch.intrinsics import get_intrinsic
from accelmap.embed import csp
from accelmap.embed.csp import Options, Piece, Solution, assignment, is_hyper_rectangle, verify
from accelmap.embed.dataflow import _overlap_isl, dataflow, overlap_kind
from accelmap.embed.search import embed
from accelmap.workload.constructors import batched_matmul, conv2d, depthwise_conv2d
from accelmap.workload.text_form import parse_expression


def _pointwise_verify(op, intr, sol, opts, odf=None, idf=None):
    """Seed 000's constraints checked one intrinsic instance variable at a time (the definition)."""
    roles = dict(sol.roles)
    axes = dict(sol.axes)
    val = {}
    for ipt in itertools.product(*(range(s) for _, s in intr.dims)):
        v = {d: 0 for d in op.dim_names}
        for a, i in zip([d for d, _ in intr.dims], ipt):
            rem = i
            for pc in axes[a]:
                v[pc.dim] += (rem % pc.length) * pc.step
                rem //= pc.length
        val[ipt] = v
    pos = {d: k for k, (d, _) in enumerate(intr.dims)}
    inst = [tuple(v[d] for d in op.dim_names) for v in val.values()]
    if len(set(inst)) != len(inst):
        return "AllDiff over multiply/accumulate instances"
    steps = {pc.dim: pc.step for _, ps in sol.axes for pc in ps}
    for v in val.values():
        for d, x in v.items():
            if x >= op.sizes[d] and not (opts.pad and x < opts.bound * steps.get(d, 1)):
                return f"domain of {d}"
    for io in intr.operands:
        t = roles[io.name]
        kpos = [pos[ix.dims[0]] for ix in io.indices]
        tidx = op.operand(t).indices
        groups, first = {}, {}
        for ipt in sorted(val):
            v = val[ipt]
            key = tuple(ipt[k] for k in kpos)
            elem = tuple(sum(c * v[d] for d, c in ix.terms) for ix in tidx)
            groups.setdefault(key, set()).add(elem)
            if key not in first:
                first[key] = (tuple(c * v[d] for ix in tidx for d, c in ix.terms)
                              if opts.rect_space == "access" else elem)
        if any(len(g) != 1 for g in groups.values()):
            return f"edge constraint: an element of {io.name} maps to several elements of {t}"
        elems = [next(iter(groups[k])) for k in sorted(groups)]
        if (io.is_output or opts.alldiff_inputs) and len(set(elems)) != len(elems):
            return f"AllDiff over {io.name}"
        if not is_hyper_rectangle(list(dict.fromkeys(first[k] for k in sorted(first)))):
            return f"hyper-rectangle over {io.name}"
    if opts.memory and odf is not None and idf is not None:
        opos = [pos[x] for x in idf.output_dims]
        out_of = {}
        for ipt, v in val.items():
            out_of.setdefault(tuple(ipt[k] for k in opos), tuple(v[d] for d in odf.output_dims))
        outs = sorted(out_of)
        lines = [e for e in outs if sum(1 for x in e if x) <= 1]
        pairs = [(outs[i - 1], outs[i]) for i in range(1, len(outs))] + [(outs[0], e) for e in lines[1:]]
        for e0, e1 in pairs:
            for io in intr.inputs:
                if _overlap_isl(odf, roles[io.name], out_of[e0], out_of[e1]) != \
                        _overlap_isl(idf, io.name, e0, e1):
                    return f"memory access overlap of {io.name}"
    return None


CASES = [
    (conv2d("c", n=2, c=3, h=12, w=11, k=20, r=3, s=2, stride=2, dilation=(1, 2), padding=1), "vta_gemm"),
    (conv2d("g", c=16, h=6, w=6, k=24, r=3, s=3, groups=4, padding=1), "vta_gemm_8x8x8"),
    (depthwise_conv2d("dw", c=20, h=7, w=7, r=3, s=3, padding=1), "simd2d_16x2"),
    (batched_matmul("bmm", batch=3, m=5, n=20, k=18), "gemv_16x16"),
]


def test_array_verify_equals_pointwise_on_every_candidate_the_search_checks():
    seen = []
    real = csp.verify

    def spy(op, intr, sol, opts, odf=None, idf=None):
        got = real(op, intr, sol, opts, odf, idf)
        seen.append((op, intr, sol, opts, odf, idf, got))
        return got

    csp._VERIFIED.clear()
    csp.verify = spy
    try:
        for op, name in CASES:
            for mode in ("strict", "relaxed"):
                embed(op, get_intrinsic(name), mode, processes=1, build=False, max_assets=6)
    finally:
        csp.verify = real
        csp._VERIFIED.clear()
    assert len(seen) > 100
    for op, intr, sol, opts, odf, idf, got in seen[::len(seen) // 40]:   # the definition is slow: a spread sample
        assert got == _pointwise_verify(op, intr, sol, opts, odf, idf), str(sol)


def test_array_verify_equals_pointwise_on_random_candidates():
    rng = random.Random(7)
    op = conv2d("c", n=2, c=5, h=9, w=9, k=12, r=3, s=3, stride=2, padding=1)
    intr = get_intrinsic("vta_gemm_8x8x8").operator
    odf, idf = dataflow(op, {d: 16 for d in op.dim_names}), dataflow(intr)
    verdicts = set()
    for _ in range(150):
        axes = []
        free = list(op.dim_names)
        for a, size in intr.dims:
            ps = []
            rest = size
            while rest > 1 and free and rng.random() < 0.9:
                d = free.pop(rng.randrange(len(free)))
                ln = rng.choice([x for x in (2, 4, 8) if rest % x == 0])
                ps.append(Piece(d, ln, rng.choice((1, 1, 2, 3))))
                rest //= ln
            axes.append((a, tuple(ps)))
        roles = (("a", "I"), ("b", "W"), ("c", "O")) if rng.random() < 0.5 else (("a", "W"), ("b", "I"), ("c", "O"))
        sol = Solution(roles, tuple(axes), "x")
        opts = rng.choice([Options(bound=8, max_stride=3),
                           Options(bound=8, memory=False, rect_space="access", alldiff_inputs=False)])
        got = verify(op, intr, sol, opts, odf, idf)
        verdicts.add(got)
        assert got == _pointwise_verify(op, intr, sol, opts, odf, idf), str(sol)
    assert len(verdicts) >= 3


def test_huge_coordinates_switch_to_exact_python_integers():
    big = 1 << 61
    op = parse_expression(f"O[m] += A[m, {big}*k] * B[k]", {"m": 16, "k": 16})
    intr = get_intrinsic("gemv_16x16").operator             # c[y] += a[y,z] * b[z]
    sol = Solution((("a", "A"), ("b", "B"), ("c", "O")), (("y", (Piece("m", 16, 1),)), ("z", (Piece("k", 16, 1),))),
                   "x")
    _, val = assignment(op, intr, sol)
    assert val.dtype == object
    for opts in (Options(bound=16), Options(bound=16, memory=False, rect_space="access", alldiff_inputs=False)):
        assert verify(op, intr, sol, opts) is None
        assert verify(op, intr, sol, opts) == _pointwise_verify(op, intr, sol, opts)
    shifted = Solution(sol.roles, (("y", (Piece("m", 16, 1),)), ("z", (Piece("m", 16, 1),))), "x")
    assert verify(op, intr, shifted, Options(bound=16)) == _pointwise_verify(op, intr, shifted, Options(bound=16))
    walk = [(m, k * big) for m in range(3) for k in range(16)]   # 16 * 2**61 overflows int64
    assert is_hyper_rectangle(walk)
    assert not is_hyper_rectangle(walk[:-1] + [(2, 16 * big)])
    _, small = assignment(conv2d("c", c=4, h=5, w=5, k=4, r=3, s=3), intr,
                          Solution(sol.roles, tuple((a, ()) for a, _ in intr.dims), "x"))
    assert small.dtype == np.int64


def test_memoized_overlap_kind_equals_isl_on_every_pair():
    op = conv2d("c", n=2, c=3, h=9, w=10, k=4, r=3, s=2, stride=(2, 1), dilation=(2, 1), padding=(1, 0))
    df = dataflow(op, {"P": 5, "Q": 6})
    ext = dict(df.extents)
    grid = list(itertools.product(*(range(ext[d] + 1) for d in df.output_dims)))   # one step past the box
    rng = random.Random(3)
    pairs = [(rng.choice(grid), rng.choice(grid)) for _ in range(400)]
    pairs += [(p, p) for p in grid[:5]] + [(grid[0], grid[-1])]
    kinds = set()
    for p0, p1 in pairs:
        for operand in ("I", "W"):
            got = overlap_kind(df, operand, p0, p1)
            kinds.add(got)
            assert got == _overlap_isl(df, operand, p0, p1), (operand, p0, p1)
    assert kinds == {"full", "partial", "none"}


def test_portfolio_in_worker_processes_finds_what_one_process_finds():
    op = conv2d("c", c=3, h=12, w=12, k=32, r=3, s=3, stride=2, padding=1)
    one = embed(op, get_intrinsic("vta_gemm"), "relaxed", processes=1, build=False, max_assets=4)
    two = embed(op, get_intrinsic("vta_gemm"), "relaxed", processes=2, build=False, max_assets=4)
    assert not one.stats.timed_out and not two.stats.timed_out
    assert [s.key() for s in two.solutions] == [s.key() for s in one.solutions] and one.solutions
    assert two.stats.expanded == one.stats.expanded and two.stats.assets == one.stats.assets
