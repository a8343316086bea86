"""Command line: ``accelmap <command>``. Each command lives in its own module.

User errors (AccelmapError) print one line and exit with status 2; anything
else is our bug and keeps its traceback.
"""

from __future__ import annotations

import sys

import click

from accelmap.errors import AccelmapError


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except AccelmapError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)


@click.group(cls=_Group)
@click.version_option(package_name="accelmap")
def main() -> None:
    """Map DNN operators onto hardware accelerators."""


# Commands register themselves on import; keep one line per command module.
from accelmap.cli import evaluate_cmd  # noqa: E402,F401
from accelmap.cli import import_cmd  # noqa: E402,F401
from accelmap.cli import arch_cmd  # noqa: E402,F401
from accelmap.cli import embed_cmd  # noqa: E402,F401
from accelmap.cli import codegen_cmd  # noqa: E402,F401
from accelmap.cli import simulate_cmd  # noqa: E402,F401
from accelmap.cli import map_cmd  # noqa: E402,F401
