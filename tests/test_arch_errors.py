"""Bad accelerator files through ``accelmap arch show``: one clear line naming file and field, exit 2."""

import pytest
import yaml
from click.testing import CliRunner

from accelmap.cli import main

BASE = {
    "name": "tiny",
    "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 32}},
    "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit",
         "read_energy": "100 pJ"},
        {"name": "GLB", "holds": ["I", "O"], "capacity": "108 KB", "width": "16 bit", "read_energy": "6 pJ",
         "fanout": {"axes": [{"name": "X", "size": 4}]}},
        {"name": "RF", "holds": ["I", "W", "O"], "partitions": {"I": "12 words", "W": "224 words", "O": "24 words"},
         "width": "16 bit", "read_energy": "1 pJ"},
    ],
}


def _edit(path, value):
    d = yaml.safe_load(yaml.safe_dump(BASE))
    *head, last = path
    node = d
    for k in head:
        node = node[k]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return yaml.safe_dump(d, sort_keys=False)


_DELETE = object()

CASES = [
    ("unknown key", _edit(["levels", 1, "capasity"], "1 KB"),
     "levels[1].capasity: unknown key 'capasity'; allowed: name, holds, capacity"),
    ("size unit", _edit(["levels", 1, "capacity"], "108 KBB"),
     "levels[1].capacity: '108 KBB': unknown unit 'KBB'"),
    ("energy unit", _edit(["levels", 1, "read_energy"], "6 pJJ"),
     "levels[1].read_energy: '6 pJJ': unknown unit 'pJJ'"),
    ("energy without unit", _edit(["levels", 1, "read_energy"], 6),
     "levels[1].read_energy: 6 has no unit"),
    ("negative size", _edit(["levels", 1, "capacity"], "-4 KB"),
     "levels[1].capacity: '-4 KB' is negative"),
    ("missing level name", _edit(["levels", 2, "name"], _DELETE),
     "levels[2].name: is required"),
    ("class nobody holds", _edit(["levels", 0, "holds"], ["I", "O"]),
     "levels[0].holds: the outermost level 'DRAM' must hold every operand class (I, W, O); it does not hold W"),
    ("not a class", _edit(["levels", 1, "holds"], ["I", "X"]),
     "levels[1].holds[1]: 'X' is not an operand class; allowed: I, W, O"),
    ("capacity and partitions", _edit(["levels", 1, "partitions"], {"I": "1 KB", "O": "1 KB"}),
     "levels[1]: give exactly one of 'capacity'"),
    ("partition for an unheld class", _edit(["levels", 2, "holds"], ["I", "O"]),
     "levels[2].partitions: partition for W, which the level does not hold"),
    ("duplicate level names", _edit(["levels", 2, "name"], "GLB"),
     "levels[2].name: level name 'GLB' is used twice"),
    ("broken yaml", "name: tiny\nlevels: [\n  - name: DRAM\n", "line "),
]


@pytest.mark.parametrize("label,text,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_accelerator_file_gives_one_line(tmp_path, label, text, expected):
    p = tmp_path / "acc.yaml"
    p.write_text(text)
    r = CliRunner().invoke(main, ["arch", "show", str(p)])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, r.output
    assert lines[0].startswith(f"error: {p}: "), lines[0]
    assert expected in lines[0], lines[0]
    assert "Traceback" not in r.output


def test_the_base_file_is_valid(tmp_path):
    p = tmp_path / "acc.yaml"
    p.write_text(yaml.safe_dump(BASE))
    r = CliRunner().invoke(main, ["arch", "show", str(p)])
    assert r.exit_code == 0 and "RF (x4)" in r.output


def test_unknown_preset_lists_the_presets():
    r = CliRunner().invoke(main, ["arch", "show", "eyeriss"])
    assert r.exit_code == 2
    assert "no preset named 'eyeriss'" in r.output and "eyeriss_like" in r.output
