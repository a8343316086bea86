"""``accelmap evaluate``: works on every bundled preset; bad files give one clear line, exit 2."""

import json

import pytest
from click.testing import CliRunner

from accelmap.cli import main


@pytest.mark.parametrize("arch", ["eyeriss_like", "tpu_like", "vta_like"])
def test_evaluate_bundled_example(arch):
    r = CliRunner().invoke(main, ["evaluate", "--arch", arch])
    assert r.exit_code == 0, r.output
    assert "MACs 903,168" in r.output and "latency" in r.output
    j = CliRunner().invoke(main, ["evaluate", "--arch", arch, "--json"])
    data = json.loads(j.output)
    assert data["macs"] == 903_168 and data["energy_total_pj"] > 0


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


BAD_ARCH = {
    "unknown key": ("levels:\n  - {name: DRAM, holds: [I, W, O], capacity: unbounded, colour: red}\n",
                    "levels[0].colour: unknown key 'colour'"),
    "wrong unit": ("levels:\n  - {name: DRAM, holds: [I, W, O], capacity: 108 KBB}\n",
                   "levels[0].capacity: '108 KBB': unknown unit 'KBB'"),
    "no unit": ("levels:\n  - {name: DRAM, holds: [I, W, O], capacity: unbounded, read_energy: 5}\n",
                "levels[0].read_energy: 5 has no unit"),
    "negative": ("levels:\n  - {name: DRAM, holds: [I, W, O], capacity: -4 KB}\n",
                 "levels[0].capacity: '-4 KB' is negative"),
    "class unheld": ("levels:\n  - {name: DRAM, holds: [I, W], capacity: unbounded}\n",
                     "levels[0].holds: the outermost level 'DRAM' must hold every operand class"),
    "bad class": ("levels:\n  - {name: DRAM, holds: [I, W, X], capacity: unbounded}\n",
                  "levels[0].holds[2]: 'X' is not an operand class"),
    "broken yaml": ("levels: [\n", "not valid YAML"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARCH))
def test_bad_accelerator_file(tmp_path, case):
    body, msg = BAD_ARCH[case]
    text = body if case == "broken yaml" else "name: bad\ncompute: {mac_energy: 1 pJ}\n" + body
    path = _write(tmp_path, "bad.yaml", text)
    r = CliRunner().invoke(main, ["evaluate", "--arch", path, "--mapping", path])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), r.output
    assert msg in lines[0], lines[0]


@pytest.mark.parametrize("text,msg", [
    ("mapping:\n  - {level: DRAM, temporal: [[K, 2]]}\n", "no entry for levels ['GLB', 'RF']"),
    ("mapping:\n  - {level: DRAM, temporal: [[K, two]]}\n", "is not a loop"),
    ("mapping:\n  - {level: DRAMX}\n", "unknown level 'DRAMX'"),
    ("mapping:\n  - {level: DRAM}\n  - {level: GLB}\n  - {level: RF}\n", "dimension K has size 32 but its loops"),
])
def test_bad_mapping_file(tmp_path, text, msg):
    path = _write(tmp_path, "m.yaml", text)
    r = CliRunner().invoke(main, ["evaluate", "--arch", "eyeriss_like", "--mapping", path])
    assert r.exit_code == 2 and msg in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_bad_workload_file(tmp_path):
    path = _write(tmp_path, "w.yaml", "conv2d: {c: 3, h: 8, w: 8, k: 4, r: 9, s: 3}\n")
    r = CliRunner().invoke(main, ["evaluate", "--workload", path])
    assert r.exit_code == 2 and "kernel 9x3" in r.output and "does not fit input 8x8" in r.output
    r = CliRunner().invoke(main, ["evaluate", "--workload", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2 and "file not found" in r.output
