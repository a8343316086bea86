"""``accelmap vectorize``: the schedule, the modeled cycles, a bit-exact run, and one-line errors."""

from __future__ import annotations

import yaml
from click.testing import CliRunner

from accelmap.cli import main


def test_vectorize_paper_workload_runs_bit_exact(tmp_path):
    cpp = tmp_path / "k.cpp"
    res = CliRunner().invoke(main, ["vectorize", "-w", "CV-2x2", "--arch", "aie_like", "--precision", "int32",
                                    "--run", "--emit", str(cpp)])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "CV-2x2: CONV2D output 256x16x1, filter 2x2x1x1, int32, 16,384 MACs" in out
    assert "paper's:  vec x, U&J x,y 1,4, order xy" in out
    assert "schedule: vec x lmac8" in out and "O:KYX W:KCSR I:CYX" in out
    assert "C++ kernel bit-exact, NumPy emulator bit-exact" in out
    assert ("simulated: 2,709 cycles cycle by cycle (the model: 2,709); every operand read in time and unclobbered: "
            "yes; output bit-exact") in out
    assert "lmul8(" in cpp.read_text()


def test_vectorize_workload_file(tmp_path):
    w = tmp_path / "conv.yaml"
    w.write_text(yaml.safe_dump({"name": "c", "conv2d": {"c": 4, "h": 4, "w": 34, "k": 16, "r": 3, "s": 3}}))
    res = CliRunner().invoke(main, ["vectorize", "-w", str(w), "--run"])
    assert res.exit_code == 0, res.output
    assert "c: CONV2D output 32x2x16, filter 3x3x4x16, int16, 36,864 MACs" in res.output
    assert "bit-exact" in res.output
    # same-size padding (ONNX pads) reads a zero halo around the stored 34x4 image
    w.write_text(yaml.safe_dump({"name": "p", "conv2d": {"c": 4, "h": 4, "w": 32, "k": 16, "r": 3, "s": 3,
                                                          "padding": 1}}))
    res = CliRunner().invoke(main, ["vectorize", "-w", str(w), "--run", "--precision", "int32"])
    assert res.exit_code == 0, res.output
    assert "p: CONV2D output 32x4x16, filter 3x3x4x16, int32, padding 1,1/1,1 (X/Y lo,hi)" in res.output
    assert "C++ kernel bit-exact, NumPy emulator bit-exact" in res.output


def test_vectorize_bad_input_is_one_line(tmp_path):
    r = CliRunner().invoke(main, ["vectorize", "-w", "CV-99x99"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "no paper workload named 'CV-99x99'" in r.output
    w = tmp_path / "pad.yaml"
    w.write_text(yaml.safe_dump({"conv2d": {"n": 2, "c": 4, "h": 8, "w": 8, "k": 16, "r": 3, "s": 3}}))
    r = CliRunner().invoke(main, ["vectorize", "-w", str(w)])
    assert r.exit_code == 2 and "batch N=2" in r.output and r.output.count("\n") == 1
    r = CliRunner().invoke(main, ["vectorize", "-w", "CV-3x3", "--arch", "eyeriss_like"])
    assert r.exit_code == 2 and "Lanes and Cols" in r.output
    r = CliRunner().invoke(main, ["vectorize", "-w", "FC", "--precision", "int32", "--paper-schedule"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "data memory" in r.output


def test_vectorize_paper_schedule():
    r = CliRunner().invoke(main, ["vectorize", "-w", "REG-3x3", "--paper-schedule"])
    assert r.exit_code == 0, r.output
    assert "schedule: vec x mac16 U&J x1,y1,z1,k1 order kxy O:KYX W:K(C/2)SR(2) I:(C/2)YX(2)" in r.output
    assert "registers peak 1152 bits interleaved, 13824 if all loads came first" in r.output
    # 36 mac16 per iteration, but the register files hold the overlapped iterations only at II 48
    assert ("modeled:  14,613 cycles, 20.18 MACs/cycle = 63.1% of the 32 peak (II 48, registers-bound, resource "
            "bound 36;") in r.output
    r = CliRunner().invoke(main, ["vectorize", "-w", "CONV3D-3x3x3", "--paper-schedule"])
    assert r.exit_code == 2 and "the paper reports no schedule" in r.output
