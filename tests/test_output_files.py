"""Output files: exactly the file named, the usual mode, refused before any work when unusable."""

import os
import stat

import pytest
from click.testing import CliRunner

from accelmap.cli import main
from accelmap.examples import example_path
from accelmap.file_io import write_atomic

PROBLEM = ["-w", example_path("conv_small.yaml"), "-a", "eyeriss_like",
           "-m", example_path("conv_small.eyeriss_like.mapping.yaml")]


def _mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def _umask():
    old = os.umask(0o022)
    os.umask(old)
    return old


def test_write_atomic_honours_umask(tmp_path):
    p = tmp_path / "a.json"
    write_atomic(p, "{}\n")
    assert p.read_text() == "{}\n" and _mode(p) == 0o666 & ~_umask()
    assert os.listdir(tmp_path) == ["a.json"]


def test_timeline_writes_exactly_the_named_png(tmp_path):
    out = tmp_path / "t.png"
    r = CliRunner().invoke(main, ["simulate", *PROBLEM, "--timeline", str(out), "--no-functional"])
    assert r.exit_code == 0, r.output
    assert f"wrote {out}" in r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(tmp_path) == ["t.png"] and _mode(out) == 0o666 & ~_umask()


def test_arch_png_writes_exactly_the_named_file(tmp_path):
    out = tmp_path / "sub" / "a.png"
    r = CliRunner().invoke(main, ["arch", "show", "eyeriss_like", "--png", str(out)])
    assert r.exit_code == 0, r.output
    assert os.listdir(out.parent) == ["a.png"] and _mode(out) == 0o666 & ~_umask()


@pytest.mark.parametrize("args,option", [
    (["simulate", *PROBLEM, "--timeline", "{d}"], "--timeline"),
    (["simulate", *PROBLEM, "--timeline", "{d}/t"], "--timeline"),
    (["simulate", *PROBLEM, "--timeline", "{d}/t.svg"], "--timeline"),
    (["simulate", *PROBLEM, "--timeline", "{f}/t.png"], "--timeline"),
    (["arch", "show", "eyeriss_like", "--png", "{d}"], "--png"),
    (["arch", "show", "eyeriss_like", "--png", "{d}/a"], "--png"),
    (["arch", "show", "eyeriss_like", "--png", "{f}/a.png"], "--png"),
    (["import", "resnet18", "-o", "{d}"], "--output"),
    (["import", "resnet18", "-o", "{f}/r.json"], "--output"),
    (["import", "resnet18", "-o", "{f}/deeper/r.json"], "--output"),
    (["codegen", *PROBLEM, "-o", "{d}"], "--output"),
    (["codegen", *PROBLEM, "-o", "{f}/c.c"], "--output"),
])
def test_unusable_output_paths_are_one_line_and_nothing_is_written(tmp_path, args, option):
    d = tmp_path / "d"
    d.mkdir()
    f = tmp_path / "file"
    f.write_text("x")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    r = CliRunner().invoke(main, [a.format(d=d, f=f) for a in args])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {option} "), r.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert f.read_text() == "x"


def test_timeline_on_a_directory_does_not_write_a_sibling(tmp_path):
    d = tmp_path / "tmp"
    d.mkdir()
    r = CliRunner().invoke(main, ["simulate", *PROBLEM, "--timeline", str(d)])
    assert r.exit_code == 2
    assert not (tmp_path / "tmp.png").exists() and os.listdir(d) == []


def test_check_output_dir(tmp_path):
    from accelmap.errors import SpecError
    from accelmap.file_io import check_output_dir

    f = tmp_path / "file"
    f.write_text("x")
    assert check_output_dir(tmp_path, "--out") == tmp_path
    assert check_output_dir(tmp_path / "new" / "deeper", "--out") == tmp_path / "new" / "deeper"
    for bad, msg in [(f, "exists and is not a folder"), (f / "sub", "is a file, not a folder"),
                     (f / "a" / "b", "is a file, not a folder"), ("/proc/accelmap-out", "cannot create folders in /proc"), ("/proc", "cannot write into")]:
        with pytest.raises(SpecError, match=msg):
            check_output_dir(bad, "--out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
