"""Bad input gives a clear 'no embedding: why' or a one-line error."""

import itertools
import time

import pytest
from click.testing import CliRunner

from accelmap.arch.intrinsics import get_intrinsic, intrinsic_from_dict
from accelmap.arch.schema import accelerator_from_dict
from accelmap.cli import main
from accelmap.embed import csp
from accelmap.embed.search import embed
from accelmap.errors import SpecError
from accelmap.workload.constructors import conv2d, depthwise_conv2d
from accelmap.workload.text_form import parse_expression


def test_operator_without_a_two_operand_mac():
    op = parse_expression("O[n] += I[n,c]", {"n": 4, "c": 8})
    r = embed(op, get_intrinsic("vta_gemm"))
    assert not r.found
    assert "multiplies 1 operand(s)" in r.reason
    assert "no embedding:" in r.summary()


def test_precision_mismatch():
    op = conv2d("c", c=16, h=8, w=8, k=16, r=3, s=3, bits={"I": 16, "W": 16, "O": 32})
    r = embed(op, get_intrinsic("vta_gemm"))
    assert not r.found and "exceeds what vta_gemm multiplies" in r.reason
    op = conv2d("c", c=16, h=8, w=8, k=16, r=3, s=3, bits={"O": 64})
    assert "accumulates in 32 bits" in embed(op, get_intrinsic("vta_gemm")).reason


def test_no_reduction_for_a_reducing_intrinsic():
    op = parse_expression("O[n,k] += A[n] * B[k]", {"n": 4, "k": 8})
    r = embed(op, get_intrinsic("dot_16"))
    assert not r.found and "no reduction" in r.reason


def test_strict_without_solution_says_why():
    dw = depthwise_conv2d("dw", c=20, h=7, w=7, r=3, s=3, padding=1)
    r = embed(dw, get_intrinsic("vta_gemm"), "strict", processes=1)
    assert not r.found
    assert r.reason == ("axis y of vta_gemm (size 16) must walk an output dimension of dw that indexes O and W but "
                        "not I; dw has no such dimension, and an axis longer than 1 cannot be left empty "
                        "(try --mode relaxed)")
    assert embed(dw, get_intrinsic("vta_gemm"), "relaxed", processes=1, build=False).stats.solutions > 0


def test_structurally_impossible_embedding_names_the_axis_in_every_role_order():
    dw = depthwise_conv2d("dw", c=20, h=7, w=7, r=3, s=3, padding=1)
    r = embed(dw, get_intrinsic("vta_gemm_8x8x8"), "relaxed", processes=1)
    assert not r.found and r.stats.expanded == 0     # proven before searching
    assert r.reason == ("axis y of vta_gemm_8x8x8 (size 8) must walk an output dimension of dw that indexes O but "
                        "not I; or, with the inputs the other way round, axis x of vta_gemm_8x8x8 (size 8) must "
                        "walk an output dimension of dw that indexes O but not I; dw has no such dimension, and an "
                        "axis longer than 1 cannot be left empty")
    assert "try --mode relaxed" not in embed(dw, get_intrinsic("vta_gemm_8x8x8"), "strict").reason


def test_time_limit_is_reported():
    op = conv2d("c", c=3, h=30, w=30, k=64, r=3, s=3)
    r = embed(op, get_intrinsic("vta_gemm"), "relaxed", time_limit=0.0, processes=1)
    assert r.stats.timed_out and r.stats.assets == 0 and not r.found
    assert "time limit" in r.summary()


def test_time_limit_returns_what_was_found(monkeypatch):
    # A clock that advances 1 ms per reading makes the cut-off point deterministic.
    tick = itertools.count()
    monkeypatch.setattr(time, "monotonic", lambda: next(tick) * 1e-3)
    csp._VERIFIED.clear()
    op = conv2d("c", c=3, h=30, w=30, k=64, r=3, s=3)
    r = embed(op, get_intrinsic("vta_gemm"), "relaxed", time_limit=2.0, processes=1)
    monkeypatch.undo()
    full = embed(op, get_intrinsic("vta_gemm"), "relaxed", processes=1, build=False)
    assert r.stats.timed_out and not full.stats.timed_out
    assert 0 < len(r.embeddings) < full.stats.solutions and 0 < r.stats.assets < full.stats.assets
    assert "the search hit its time limit, showing what it found" in r.summary()
    assert {e.solution.key() for e in r.embeddings} <= {s.key() for s in full.solutions}


@pytest.mark.parametrize("patch,message", [
    ({"kind": "systolic"}, "is not an intrinsic kind"),
    ({"expression": "c[x,y] += a[x,z] * b[z,y] * d[y]"}, "exactly two operands"),
    ({"sizes": {"x": 1, "y": 0, "z": 16}}, "must be a positive integer"),
    ({"precision": {"a": 8, "b": 8}}, "no precision for operands ['c']"),
    ({"expression": "c[x,y] += a[x,2*z] * b[z,y]"}, "plain dimensions"),
    ({"lanes": 4}, "unknown keys ['lanes']"),
])
def test_intrinsic_yaml_errors(patch, message):
    base = {"name": "g", "kind": "gemm", "expression": "c[x,y] += a[x,z] * b[z,y]",
            "sizes": {"x": 1, "y": 16, "z": 16}, "precision": {"a": 8, "b": 8, "c": 32}}
    base.update(patch)
    with pytest.raises(SpecError) as e:
        intrinsic_from_dict(base, "f.yaml: intrinsics[0]")
    assert message in str(e.value) and "f.yaml: intrinsics[0]" in str(e.value)


def test_accelerator_intrinsics_are_validated():
    arch = {"name": "t", "compute": {"mac_energy": "1 pJ"},
            "levels": [{"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded"}],
            "intrinsics": [{"name": "g", "kind": "gemm", "expression": "c[x] += a[x,z] * b[z]",
                            "sizes": {"x": 4}, "precision": {"a": 8, "b": 8, "c": 32}}]}
    with pytest.raises(SpecError) as e:
        accelerator_from_dict(arch, "t.yaml")
    assert "t.yaml: intrinsics[0].expression" in str(e.value) and "no size given" in str(e.value)


def test_cli_embed_run_and_errors(tmp_path):
    w = tmp_path / "c.yaml"
    w.write_text("name: c\nconv2d: {n: 1, c: 3, h: 6, w: 6, k: 16, r: 3, s: 3, padding: 1}\n")
    r = CliRunner().invoke(main, ["embed", "-w", str(w), "--mode", "strict", "--run"])
    assert r.exit_code == 0, r.output
    assert "y->K:16; z->C:16" in r.output and "run: OK" in r.output and "vta_gemm(" in r.output
    r = CliRunner().invoke(main, ["embed", "-w", str(w), "--intrinsic", "nope"])
    assert r.exit_code == 2 and "no intrinsic named 'nope'" in r.output
    w16 = tmp_path / "c16.yaml"
    w16.write_text("name: c\nconv2d: {n: 1, c: 3, h: 6, w: 6, k: 16, r: 3, s: 3}\nprecision: {I: 16, W: 16, O: 32}\n")
    r = CliRunner().invoke(main, ["embed", "-w", str(w16)])
    assert r.exit_code == 1 and "no embedding: operand precision" in r.output


def test_an_axis_reported_blocked_is_one_the_search_cannot_fill():
    # The pre-search check skips the search; running every asset anyway must find nothing.
    from accelmap.embed.search import _assets, _blocked_axis, _role_orders, mode_options

    ops = [depthwise_conv2d("dw", c=8, h=6, w=6, r=3, s=3, padding=1),
           conv2d("g", c=8, h=6, w=6, k=8, r=3, s=3, groups=8),
           parse_expression("O[n,k] += A[n,c] * B[c,k]", {"n": 4, "k": 3, "c": 16}),
           parse_expression("O[b,m] += A[b,m,k] * B[b,k]", {"b": 3, "m": 5, "k": 7})]
    blocked = 0
    for op in ops:
        for name in ("vta_gemm", "vta_gemm_8x8x8", "gemv_16x16", "dot_16", "simd2d_16x2"):
            iop = get_intrinsic(name).operator
            for mode in ("strict", "relaxed"):
                if not _blocked_axis(op, iop, mode):
                    continue
                blocked += 1
                for opts in mode_options(mode, op, iop):
                    for roles in _role_orders(op, iop, opts.swap_roles):
                        for order in _assets(op, iop, 36):
                            sols, _ = csp.run_asset((op, iop, roles, opts, order, time.monotonic() + 60, 64))
                            assert not sols, (op.name, name, mode, sols[0])
    assert blocked >= 6
