"""A bad value of every accelerator property that describes one machine in two tools (issue #12's:
``refill_while_read``, ``written_at_clock_edge``, ``access_granularity``, ``final_output_bits``,
``stream_single_tile``, ``shared_along``, ``padding``) is one error line naming the file, the field, the
value and what is valid (docs/accelerator-format.md), and the CLI prints it without a traceback."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from accelmap.arch import load_accelerator
from accelmap.cli import main
from accelmap.errors import SpecError


def _machine(level: dict | None = None, compute: dict | None = None, top: dict | None = None) -> dict:
    buf = {"name": "Buf", "holds": ["I", "W", "O"], "capacity": "64 B", "width": "16 bit", **(level or {})}
    dram = {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "16 bit",
            "fanout": {"axes": [{"name": "X", "size": 2}]}}
    return {"name": "m", "compute": {"mac_energy": "1 pJ", **(compute or {})}, "levels": [dram, buf], **(top or {})}


BAD = [
    # refill_while_read: a bool, and only for a level double-buffered when two tiles fit
    (_machine({"double_buffered": "when_fits", "refill_while_read": "sometimes"}),
     r"levels\[1\]\.refill_while_read: .*boolean.*'sometimes'"),
    (_machine({"refill_while_read": True}),
     r"levels\[1\]\.refill_while_read: refill_while_read applies to a level double-buffered when two tiles fit"),
    (_machine({"double_buffered": True, "refill_while_read": True}),
     r"levels\[1\]\.refill_while_read: .*\(double_buffered: when_fits\)"),
    # written_at_clock_edge: a bool, and not beside double buffering
    (_machine({"written_at_clock_edge": "edge"}), r"levels\[1\]\.written_at_clock_edge: .*boolean.*'edge'"),
    (_machine({"written_at_clock_edge": True, "double_buffered": "when_fits"}),
     r"levels\[1\]\.written_at_clock_edge: double_buffered and written_at_clock_edge exclude each other"),
    # access granularity: a width from 1 bit up to the level's
    (_machine({"access_granularity": "32 bit"}),
     r"levels\[1\]\.access_granularity: '32 bit' is wider than the level's width \(16 bit\)"),
    # finished outputs: a whole number of bits, at least 1
    (_machine(compute={"final_output_bits": 0}), r"compute\.final_output_bits: .*greater than or equal to 1.*0"),
    (_machine(compute={"final_output_bits": "8 bit"}), r"compute\.final_output_bits: .*integer.*'8 bit'"),
    (_machine(compute={"final_output_bits": 2.5}), r"compute\.final_output_bits: .*integer.*2\.5"),
    # first and last tiles streamed: a bool
    (_machine({"stream_single_tile": "sometimes"}), r"levels\[1\]\.stream_single_tile: .*boolean.*'sometimes'"),
    # accumulators serving a column: axes of a fan-out above, each once
    (_machine({"shared_along": ["Y"]}), r"levels\[1\]\.shared_along: 'Y' is not an axis of a fan-out above level "
                                        r"'Buf'; valid: X"),
    (_machine({"shared_along": ["X", "X"]}), r"levels\[1\]\.shared_along: names axis 'X' twice"),
    (_machine({"shared_along": "X"}), r"levels\[1\]\.shared_along: .*list.*'X'"),
    # halos: moved or generated
    (_machine(top={"padding": "zeros"}), r"padding: 'zeros' is not valid; use moved .* or generated"),
]


@pytest.mark.parametrize("spec, match", BAD)
def test_a_bad_value_is_one_clear_error_line(tmp_path, spec, match):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(SpecError, match=match) as e:
        load_accelerator(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_the_cli_prints_the_line_without_a_traceback(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(_machine({"refill_while_read": True}), sort_keys=False))
    r = CliRunner().invoke(main, ["arch", "show", str(path)])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}") and "levels[1].refill_while_read" in lines[0], \
        r.output
