"""The Python API: every exported name resolves, and the README's quick-start runs as written."""

import re
from pathlib import Path

import accelmap


def test_every_exported_name_resolves():
    for name in accelmap.__all__:
        assert getattr(accelmap, name) is not None, name


def test_readme_quick_start_runs():
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"## Python API\n.*?```python\n(.*?)```", text, re.S)
    assert block, "README has a Python API quick-start"
    scope: dict = {}
    exec(compile(block.group(1), "README quick-start", "exec"), scope)
    res = scope["res"]
    # BERT's query projection on tpu_like: the weight-stationary unrolling (K on the reducing axis).
    assert {l.axis: l.dim for l in res.best.mapping.loops if l.spatial}["X"] == "K"
    assert res.lower_bound <= res.best.value and res.gap >= 0
    assert scope["sim"].cycles > 0
