"""The CLI imports each command's module only when that command runs, from one table: a command module missing
from it would be silently absent from `accelmap --help` and unreachable."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

import accelmap.cli as cli


def test_every_command_module_is_in_the_table_and_registers_its_command():
    modules = {p.stem for p in Path(cli.__file__).parent.glob("*_cmd.py")}
    assert set(cli.COMMAND_MODULES.values()) == modules
    for name in cli.COMMAND_MODULES:
        command = cli.main.get_command(None, name)
        assert command is not None and command.name == name
    out = CliRunner().invoke(cli.main, ["--help"]).output
    assert all(name in out for name in cli.COMMAND_MODULES)
