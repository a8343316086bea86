"""Generated C: bit-exact against NumPy, transfer counts equal to the cost model (and brute force)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from accelmap.arch import accelerator_from_dict, get_accelerator
from accelmap.cli import main
from accelmap.codegen import BuildError, compile_shared, generate_c, load_run
from accelmap.codegen.c_tensors import random_inputs, reference
from accelmap.codegen.execute import check_mapping, run_generated
from accelmap.cost import access_counts
from accelmap.cost.brute_force_counts import reference_counts
from accelmap.errors import MappingError
from accelmap.examples import example_path
from accelmap.mapping import parse_text, validate
from accelmap.mapping.sampling import random_mapping
from accelmap.workload import conv2d, gemm, parse_expression


def _arch(levels, name="t"):
    return accelerator_from_dict({"name": name, "levels": levels,
                                  "compute": {"mac_energy": "1 pJ", "precision": {"I": [8, 16], "W": [8, 16],
                                                                                    "O": [16, 32]}}})


def _random_arch(r: random.Random):
    nlev = r.choice([2, 3, 3])
    levels, ax = [], 0
    for i in range(nlev):
        holds = ["I", "W", "O"] if i == 0 else r.sample(["I", "W", "O"], r.randint(1, 3))
        lv = {"name": f"L{nlev - i}", "holds": holds, "capacity": "unbounded", "width": "16 bit",
              "bypass": r.random() < 0.5 if i else True}
        na = r.randint(0, 2)
        if na:
            lv["fanout"] = {"axes": [{"name": f"A{ax + j}", "size": r.randint(2, 4), "multicast": r.random() < 0.5,
                                      "reduce": r.random() < 0.5} for j in range(na)]}
            ax += na
        levels.append(lv)
    return _arch(levels, "random")


# Operators that exercise strides, dilation, padding, groups, depthwise, three inputs and prior outputs.
OPERATORS = [
    conv2d("s2d2p1", n=1, c=3, h=9, w=8, k=4, r=3, s=2, stride=2, dilation=(2, 1), padding=1),
    conv2d("grouped", c=4, h=6, w=5, k=4, r=3, s=3, stride=(1, 2), padding=(1, 0, 2, 1), groups=2),
    conv2d("depthwise", c=3, h=7, w=7, k=3, r=3, s=3, stride=2, padding=1, groups=3),
    replace(gemm("gemm_prior", m=5, n=7, k=6), init_output="read"),
    parse_expression("O[i,j] += A[i,k,l] * B[k,j] * C[l,j]", dict(i=3, j=4, k=2, l=3), name="mttkrp"),
    parse_expression("O[k,p] += I[3*p+r] * W[k,r]", dict(k=3, p=5, r=4), name="conv1d_s3"),
]


def _cases():
    """(operator, accelerator, mapping): two random mappings per operator, one perfect and one imperfect."""
    out = []
    for n, op in enumerate(OPERATORS):
        for imperfect in (False, True):
            r = random.Random(1000 * n + imperfect)
            for _ in range(50):
                arch = _random_arch(r)
                try:
                    m = random_mapping(op, arch, r, imperfect=imperfect)
                except MappingError:
                    continue
                if imperfect and all(m.dim_product(d) == s for d, s in op.dims):
                    continue
                out.append((op, arch, m))
                break
    return out


CASES = _cases()


def test_cases_cover_imperfect_tiles_and_fanouts():
    assert len(CASES) == 2 * len(OPERATORS)
    assert sum(any(m.dim_product(d) != s for d, s in op.dims) for op, _, m in CASES) >= len(OPERATORS)
    assert sum(m.spatial_product() > 1 for _, _, m in CASES) >= len(OPERATORS)


@pytest.mark.parametrize("k", range(len(CASES)), ids=lambda k: f"{CASES[k][0].name}-{k % 2 and 'imperfect' or 'perfect'}")
def test_random_mapping_bit_exact_and_counts_equal_model(k):
    op, arch, m = CASES[k]
    validate(op, arch, m)
    fn = load_run(compile_shared(generate_c(op, arch, m), opt="-O0"))
    rng = np.random.default_rng(k)
    for _ in range(2):       # two input sets per compiled file
        tensors = random_inputs(op, "int", rng)
        got, counters = run_generated(fn, op, tensors, len(arch.levels))
        assert np.array_equal(got, reference(op, tensors))
    code = {(i, X.name): tuple(int(v) for v in counters[i, j]) for i in range(len(arch.levels))
            for j, X in enumerate(op.operands) if X.name in m.keep[i]}
    model = {key: c.as_tuple() for key, c in access_counts(op, arch, m).items()}
    brute = {key: c.as_tuple() for key, c in reference_counts(op, arch, m).items()}
    assert code == model
    assert code == brute


def test_presets_bundled_example_exact_counts():
    op = conv2d("small", c=8, h=6, w=6, k=8, r=3, s=3, padding=1, bits={"I": 8, "W": 8, "O": 32})
    arch = get_accelerator("vta_like")
    m = parse_text("""DRAM [ O I W ]
| for K in [0:2)
SRAM [ O I W ]
| for P in [0:6)
| for Q in [0:6)
| for R in [0:3)
| for S in [0:3)
| spatial-for K in [0:4) @Y
| spatial-for C in [0:8) @Z
""", arch)
    rep = check_mapping(op, arch, m)
    assert rep.exact and rep.counts_equal
    # multicast: the input is read once for the 4 K lanes; weights are fetched once and stay
    assert rep.counts[("DRAM", "W")] == (0, 8 * 8 * 9, 0, 0)
    assert rep.counts[("SRAM", "O")][2] == 2 * 4 * 36 * 9    # one reduced update per (K lane, step)


def test_fp32_within_tolerance():
    op = conv2d("f", c=5, h=7, w=6, k=3, r=3, s=2, stride=(2, 1), padding=1, bits={"I": 32, "W": 32, "O": 32})
    arch = _arch([{"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded"},
                  {"name": "Buf", "holds": ["I", "W", "O"], "capacity": "unbounded",
                   "fanout": {"axes": [{"name": "X", "size": 3}]}}])
    arch = replace(arch, compute=replace(arch.compute, precision=(("I", (32,)), ("W", (32,)), ("O", (32,)))))
    m = parse_text("DRAM [ O I W ]\n| for C in [0:5)\nBuf [ O I W ]\n| for P in [0:4)\n| for Q in [0:7)\n"
                   "| for R in [0:3)\n| for S in [0:2)\n| spatial-for K in [0:3) @X\n", arch)
    rep = check_mapping(op, arch, m, dtype="fp32", seed=3)
    assert rep.exact and rep.counts_equal
    assert 0 < rep.max_abs_error < 1e-4


def test_mapping_that_does_not_fit_is_refused_before_writing(tmp_path):
    out = tmp_path / "never.c"
    w = tmp_path / "w.yaml"
    w.write_text("conv2d: {c: 64, h: 56, w: 56, k: 64, r: 3, s: 3, padding: 1}\n")
    mp = tmp_path / "m.txt"
    mp.write_text("DRAM [ O I W ]\nSRAM [ O I W ]\n| for K in [0:4)\n| for C in [0:4)\n| for P in [0:56)\n"
                  "| for Q in [0:56)\n| for R in [0:3)\n| for S in [0:3)\n"
                  "| spatial-for K in [0:16) @Y\n| spatial-for C in [0:16) @Z\n")
    res = CliRunner().invoke(main, ["codegen", "-w", str(w), "-a", "vta_like", "-m", str(mp), "-o", str(out)])
    assert res.exit_code == 2
    assert "capacity exceeded at SRAM" in res.output
    assert not out.exists()


def test_compiler_failure_shows_message_and_keeps_file(tmp_path):
    c = tmp_path / "broken.c"
    with pytest.raises(BuildError) as e:
        compile_shared("int accelmap_run(void) { return undefined_symbol_here; }\n", c)
    assert str(c) in str(e.value) and "undefined_symbol_here" in str(e.value)
    assert c.exists()


def test_cli_codegen_run_on_bundled_example(tmp_path):
    out = tmp_path / "conv_small.c"
    res = CliRunner().invoke(main, ["codegen", "-w", example_path("conv_small.yaml"), "-a", "vta_like",
                                    "-m", example_path("conv_small.vta_like.mapping.yaml"), "-o", str(out), "--run"])
    assert res.exit_code == 0, res.output
    assert "bit-exact" in res.output and "transfer counts vs cost model: equal" in res.output
    assert "int accelmap_run(void **T, long long *counters)" in Path(out).read_text()
