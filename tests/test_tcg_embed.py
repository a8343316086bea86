"""``accelmap embed --method topdown``: chapter 3's method through the embed command, beside the default."""

import dataclasses

from click.testing import CliRunner

from accelmap.arch.intrinsics import get_intrinsic
from accelmap.cli import main
from accelmap.embed.tcg_embed import topdown_embed, verify
from accelmap.workload.files import load_operator

GEMM = 'name: gemm_small\nexpression: "c[i,j] += a[i,k] * b[k,j]"\ndims: {i: 8, j: 32, k: 48}\n'


def _gemm(tmp_path):
    path = tmp_path / "gemm.yaml"
    path.write_text(GEMM)
    return str(path)


def test_topdown_counts_calls_with_the_intrinsic_sizes(tmp_path):
    op = load_operator(_gemm(tmp_path))
    res = topdown_embed(op, get_intrinsic("dot_16"))
    assert (len(res.search.candidates), len(res.embeddings)) == (24, 2)
    best = res.embeddings[0]
    # i and j stay loops around the dot product, k = 48 is three 16-wide calls: 8 * 32 * 3
    assert best.call_count == 768 and best.utilization == 1.0
    assert best.cycles == 768   # one call an issue cycle (dot_16 has no cycles key)
    slow = topdown_embed(op, dataclasses.replace(get_intrinsic("dot_16"), cycles=3)).embeddings[0]
    assert (slow.call_count, slow.cycles) == (768, 2304)
    assert best.layouts == ("b: transposed to axes (1, 0)",)
    assert all(verify(res, e)[0] for e in res.embeddings)


def test_cli_embed_method_topdown_prints_like_the_default(tmp_path):
    wl = _gemm(tmp_path)
    top = CliRunner().invoke(main, ["embed", "--method", "topdown", "-w", wl, "-i", "vta_gemm", "--run"])
    assert top.exit_code == 0, top.output
    assert "1 top-down embedding(s) of vta_gemm in gemm_small" in top.output
    # x = 1, y = 16, z = 16: j = 32 is two calls wide, k = 48 three deep, i = 8 a loop around them
    assert "calls 48 (MAC utilization 100.0%), 48 issue cycles" in top.output
    assert "vta_gemm(y<-j, z<-k)" in top.output and "run: OK" in top.output
    default = CliRunner().invoke(main, ["embed", "-w", wl, "-i", "vta_gemm", "--run", "--no-mapper", "--top", "1"])
    assert default.exit_code == 0, default.output
    assert "embedding(s) of vta_gemm in gemm_small (relaxed)" in default.output   # dataflow stays the default
    for line in ("calls 48 (MAC utilization 100.0%)", "   program:", "   run: OK"):
        assert line in top.output and line in default.output


def test_cli_embed_method_topdown_without_a_solution_and_bad_options(tmp_path):
    r = CliRunner().invoke(main, ["embed", "--method", "topdown", "-i", "vta_gemm", "--time-limit", "1"])
    assert r.exit_code == 1 and "no embedding: no candidate graph is fully covered" in r.output
    bad = CliRunner().invoke(main, ["embed", "--method", "topdown", "-w", _gemm(tmp_path), "--mode", "strict"])
    assert bad.exit_code == 2 and "--mode: applies to the dataflow method only" in bad.output
