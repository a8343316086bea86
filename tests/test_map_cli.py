"""``accelmap map``: table, output files, cache reuse, failed layers and bad input."""

from __future__ import annotations

import csv
import json
import logging

import yaml
from click.testing import CliRunner

from accelmap.arch.schema import accelerator_from_dict
from accelmap.cli import main
from accelmap.mapping.forms import mapping_from_yaml
from test_model_mapper import TINY

# DeepBench column order; rows 0 and 2 are the same convolution, so it is one layer of count 2.
TABLE = """w,h,c,n,k,filter_w,filter_h,pad_w,pad_h,stride_w,stride_h
3,1,1,1,2,2,1,0,0,1,1
2,1,2,1,2,1,1,0,0,1,1
3,1,1,1,2,2,1,0,0,1,1
"""


def _setup(tmp_path):
    arch = tmp_path / "tiny.yaml"
    arch.write_text(yaml.safe_dump(TINY))
    table = tmp_path / "net.csv"
    table.write_text(TABLE)
    return str(arch), str(table)


def _map(*args):
    return CliRunner().invoke(main, ["map", *map(str, args)])


def test_map_prints_the_table_and_writes_every_file(tmp_path):
    arch, table = _setup(tmp_path)
    out, cache = tmp_path / "out", tmp_path / "c.sqlite"
    r = _map(table, "--arch", arch, "--strategy", "optimal", "--out", out, "--cache", cache, "--jobs", 1)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == "model net on tiny, objective edp, strategy optimal"
    rows = [ln.split() for ln in lines if ln.startswith("conv")]
    assert [(row[0], row[2], row[3]) for row in rows] == [("conv0", "2", "8"), ("conv1", "1", "8")]
    assert all(row[-1] == "optimal" for row in rows)
    assert "total (3 nodes in 2 distinct layers): 24 MACs" in r.output
    assert "2 of 2 mapped layers proven optimal; 2 searched, 0 from the cache" in r.output

    names = {p.name for p in out.iterdir()}
    assert names == {"summary.json", "layers.csv", "layers", "energy_breakdown.png", "latency_utilization.png"}
    assert {p.name for p in (out / "layers").iterdir()} == {"conv0.workload.yaml", "conv0.mapping.yaml",
                                                           "conv1.workload.yaml", "conv1.mapping.yaml"}
    with open(out / "layers.csv") as f:
        recs = list(csv.DictReader(f))
    assert [(x["layer"], x["count"], x["macs_each"], x["proven_optimal"]) for x in recs] == \
        [("conv0", "2", "8", "1"), ("conv1", "1", "8", "1")]
    assert recs[0]["nodes"] == "conv0;conv2"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["distinct_layers"] == 2 and summary["accelerator_nodes"] == 3
    total = sum(float(x["energy_pj_each"]) * int(x["count"]) for x in recs)
    assert abs(summary["totals"]["energy_pj"] - total) <= 1e-9 * total
    # The mapping files load back as mappings of the accelerator.
    acc = accelerator_from_dict(TINY, "tiny")
    for name in ("conv0", "conv1"):
        p = out / "layers" / f"{name}.mapping.yaml"
        mapping_from_yaml(yaml.safe_load(p.read_text()), acc, str(p))
    assert (out / "energy_breakdown.png").read_bytes()[:4] == b"\x89PNG"

    again = _map(table, "--arch", arch, "--strategy", "optimal", "--out", out, "--cache", cache, "--no-plots")
    assert again.exit_code == 0, again.output
    assert "0 searched, 2 from the cache" in again.output
    assert "optimal (cached)" in again.output


def test_a_workload_yaml_is_a_one_layer_model(tmp_path):
    arch, _ = _setup(tmp_path)
    wl = tmp_path / "mm.yaml"
    wl.write_text("name: mm\ngemm: {m: 2, n: 2, k: 2}\n")
    out = tmp_path / "o"
    r = _map(wl, "--arch", arch, "--strategy", "optimal", "--out", out, "--no-cache", "--no-plots",
             "--objective", "energy")
    assert r.exit_code == 0, r.output
    assert "objective energy" in r.output and "total (1 nodes in 1 distinct layers): 8 MACs" in r.output
    assert (out / "layers" / "mm.mapping.yaml").exists() and not (out / "energy_breakdown.png").exists()


def test_layers_that_cannot_be_mapped_are_listed_and_the_exit_code_says_none_mapped(tmp_path):
    arch, table = _setup(tmp_path)
    r = _map(table, "--arch", arch, "--precision", "I=4,W=4,O=16", "--no-cache", "--out", tmp_path / "o")
    assert r.exit_code == 1, r.output
    assert "not mapped: conv0 (x2): operand O is 16-bit, but tiny computes class O at 32 bits" in r.output
    recs = list(csv.DictReader(open(tmp_path / "o" / "layers.csv")))
    assert [x["mapping"] for x in recs] == ["failed", "failed"]


def test_an_incomplete_model_says_so_and_exits_non_zero(tmp_path):
    """One layer too large for a bounded outermost level: the others are mapped, the totals say what
    is missing, and the exit code is 1."""
    data = yaml.safe_load(yaml.safe_dump(TINY))
    data["levels"][0]["capacity"] = "64 B"
    arch = tmp_path / "bounded.yaml"
    arch.write_text(yaml.safe_dump(data))
    wl = tmp_path / "net.csv"
    wl.write_text(TABLE.splitlines()[0] + "\n" + TABLE.splitlines()[1] + "\n" + "8,8,4,1,8,3,3,0,0,1,1\n")
    r = _map(wl, "--arch", arch, "--no-cache", "--no-plots", "--out", tmp_path / "o")
    assert r.exit_code == 1, r.output
    assert "INCOMPLETE: 1 layers (1 nodes, 10,368 MACs) not mapped" in r.output
    assert "level DRAM must hold whole operands (it is the outermost level)" in r.output
    summary = json.load(open(tmp_path / "o" / "summary.json"))
    assert summary["complete"] is False and summary["not_mapped"]["macs"] == 10368


def test_bad_input_is_one_line(tmp_path):
    arch, table = _setup(tmp_path)
    cons = tmp_path / "c.yaml"
    cons.write_text("constraints:\n  spatial:\n    Z: {K: 2}\n")
    cases = [
        (["nosuchmodel", "--arch", arch], "no bundled model named 'nosuchmodel'"),
        ([table, "--arch", "nosucharch"], "no preset named 'nosucharch'"),
        ([table, "--arch", arch, "--constraints", cons], "unknown fan-out axis 'Z'; tiny has X, Y"),
        ([table, "--arch", arch, "--jobs", "0"], "--jobs: must be a positive integer, got 0"),
    ]
    for args, msg in cases:
        r = _map(*args)
        assert r.exit_code == 2, r.output
        assert msg in r.output and "Traceback" not in r.output
    r = _map(table, "--arch", arch, "--objective", "fastest")
    assert r.exit_code == 2 and "pareto" in r.output


def test_output_folder_is_replaced_whole_and_checked_before_the_search(tmp_path):
    arch, table = _setup(tmp_path)
    out = tmp_path / "o"
    r = _map(table, "--arch", arch, "--no-cache", "--out", out)
    assert r.exit_code == 0, r.output
    assert (out / "energy_breakdown.png").exists()
    (out / "layers" / "left_over.mapping.yaml").write_text("stale\n")
    r = _map(table, "--arch", arch, "--no-cache", "--no-plots", "--out", out)
    assert r.exit_code == 0, r.output
    # No plot of the earlier run and no file of another run survive.
    assert not (out / "energy_breakdown.png").exists() and not (out / "layers" / "left_over.mapping.yaml").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".o.")) == []
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = _map(table, "--arch", arch, "--no-cache", "--out", blocker / "sub")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "--out" in r.output, r.output
    for bad in ("nan", "inf", "0"):
        r = _map(table, "--arch", arch, "--no-cache", "--time-limit", bad, "--out", tmp_path / "x")
        assert r.exit_code == 2 and "--time-limit" in r.output and not (tmp_path / "x").exists(), r.output
    cons = tmp_path / "c.yaml"
    cons.write_text("constraints:\n  min_utilization: '-3 pJ'\n")
    r = _map(table, "--arch", arch, "--no-cache", "--constraints", cons, "--out", tmp_path / "x")
    assert r.exit_code == 2 and "min_utilization" in r.output and "Traceback" not in r.output, r.output


def test_sigterm_stops_the_workers_and_keeps_finished_layers(tmp_path):
    """A terminated run leaves no worker process behind (they outlived the parent before)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    p = subprocess.Popen([sys.executable, "-c", "from accelmap.cli import main; main()", "map", "resnet50", "--arch", "simba_like",
                          "--jobs", "2", "--no-plots", "--out", str(tmp_path / "o")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    # Wait for the workers (a loaded machine, or a sibling test worker, can slow the CLI's start-up).
    deadline = time.monotonic() + 60
    children: list[str] = []
    while not children and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.5)
        children = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    assert children, "the run should have worker processes by now"
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 143, err
    assert "terminated; finished layers are in" in err.decode()
    time.sleep(1)
    alive = [c for c in children if os.path.exists(f"/proc/{c}")
             and "Z" not in open(f"/proc/{c}/stat").read().split()[2]]
    assert alive == []


def test_verbose_logs_the_search_decisions_to_stderr_and_is_silent_without(tmp_path):
    arch, table = _setup(tmp_path)
    quiet = CliRunner().invoke(main, ["map", table, "--arch", arch, "--strategy", "heuristic", "--no-cache",
                                      "--out", str(tmp_path / "q"), "--jobs", "1", "--no-plots"])
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == ""
    loud = CliRunner().invoke(main, ["map", table, "--arch", arch, "--strategy", "heuristic", "--no-cache",
                                     "--out", str(tmp_path / "v"), "--jobs", "1", "--no-plots", "-vv"])
    assert loud.exit_code == 0, loud.output
    log = loud.stderr.splitlines()
    # Per layer: the strategy, the probes with the reason each unrolling is skipped, the climbs, the result.
    assert ("accelmap.search.mapper: conv0 on tiny: heuristic search, edp, time limit 60 s (60 s left after the certificate)"
            in log)
    assert any(ln.startswith("accelmap.search.heuristic: conv0: probe ") for ln in log)
    assert any(ln.startswith("accelmap.search.heuristic: conv1: climb from ") for ln in log)
    assert any(ln.startswith("accelmap.search.mapper: conv1: best ") for ln in log)
    # The table's rows are the same either way; the log handler is gone after the command.
    def rows(r):
        return [ln for ln in r.stdout.splitlines() if ln.startswith("conv")]
    assert rows(loud) == rows(quiet) and len(rows(quiet)) == 2
    assert not [h for h in logging.getLogger("accelmap").handlers if not isinstance(h, logging.NullHandler)]


# A strided, padded convolution (its input's stored shape is not its index space) and a GEMM-like 1x1.
ROUND_TRIP_TABLE = """w,h,c,n,k,filter_w,filter_h,pad_w,pad_h,stride_w,stride_h
5,5,2,1,2,3,3,1,1,2,2
3,1,2,1,4,1,1,0,0,1,1
"""


def test_a_mapped_layer_runs_through_evaluate_simulate_and_codegen_from_the_map_output(tmp_path):
    arch, _ = _setup(tmp_path)
    table = tmp_path / "rt.csv"
    table.write_text(ROUND_TRIP_TABLE)
    out = tmp_path / "out"
    r = _map(table, "--arch", arch, "--out", out, "--no-cache", "--no-plots", "--jobs", 1)
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert [x["name"] for x in summary["layers"]] == ["conv0", "conv1"]
    exported = []
    for layer in summary["layers"]:
        wl, mp = out / "layers" / f"{layer['name']}.workload.yaml", out / "layers" / f"{layer['name']}.mapping.yaml"
        ev = CliRunner().invoke(main, ["evaluate", "--workload", str(wl), "--arch", arch, "--mapping", str(mp),
                                       "--json"])
        assert ev.exit_code == 0, ev.output
        got = json.loads(ev.stdout)
        # The very numbers map reported: same operator (precision included), same mapping, same model.
        assert got["energy_total_pj"] == layer["energy_pj_each"]
        assert got["latency_cycles"] == layer["latency_cycles_each"]
        assert got["counts"] == layer["cost"]["counts"]
        sim = CliRunner().invoke(main, ["simulate", "--workload", str(wl), "--arch", arch, "--mapping", str(mp)])
        assert sim.exit_code == 0, sim.output
        assert "functional: output equal to NumPy" in sim.stdout
        cg = CliRunner().invoke(main, ["codegen", "--workload", str(wl), "--arch", arch, "--mapping", str(mp),
                                       "--run"])
        assert cg.exit_code == 0, cg.output
        assert "output vs NumPy: bit-exact" in cg.stdout and "transfer counts vs cost model: equal" in cg.stdout
        # And Timeloop takes the same layer: every dimension's factors multiply back to its size.
        prob = tmp_path / f"{layer['name']}.problem.yaml"
        tl = CliRunner().invoke(main, ["export-timeloop", "-w", str(wl), "-a", arch, "-m", str(mp), "--problem",
                                       str(prob)])
        if tl.exit_code == 2:
            # The one thing Timeloop cannot express here: a dim unrolled on both axes of one fan-out.
            assert "Timeloop maps a dimension to one of them" in tl.output and not prob.exists()
            continue
        assert tl.exit_code == 0, tl.output
        exported.append(layer["name"])
        sizes = yaml.safe_load(prob.read_text())["problem"]["instance"]
        product = dict.fromkeys(sizes, 1)
        for entry in yaml.safe_load(tl.stdout)["mapping"]:
            for kv in entry.get("factors", "").split():
                d, v = kv.split("=")
                product[d] *= int(v)
        assert product == sizes
    assert exported
    # The padded convolution keeps its stored input shape and padding in the workload file.
    conv0 = yaml.safe_load((out / "layers" / "conv0.workload.yaml").read_text())
    assert conv0["expression"] == "O[N,K,P,Q] += I[N,C,2*P+R,2*Q+S] * W[K,C,R,S]"
    assert conv0["shapes"] == {"I": [1, 2, 5, 5]} and conv0["padding"] == {"I": [0, 0, 1, 1]}
    assert conv0["precision"] == {"O": 32, "I": 8, "W": 8}
