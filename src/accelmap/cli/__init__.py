"""Command line: ``accelmap <command>``. Each command lives in its own module.

User errors (AccelmapError, and click's usage errors) print one line and exit
with status 2; anything else is our bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import re
import sys

import click

from accelmap.errors import AccelmapError

_LONG_QUOTED = re.compile(r"(?<!\w)'[^'\n]{61,}'(?!\w)" + r'|(?<!\w)"[^"\n]{61,}"(?!\w)')


def one_line(message: str, limit: int = 400) -> str:
    """An error message as one short line: newlines become spaces, a long quoted value an echo
    of its start, and a line still too long keeps its start (which names the file) and its end."""
    text = " ".join(message.split())
    text = _LONG_QUOTED.sub(lambda m: f"{m.group()[:41]}...{m.group()[0]} ({len(m.group()) - 2:,} characters)", text)
    if len(text) > limit:
        cut = len(text) - limit
        text = f"{text[:limit - 120]} ...({cut:,} characters cut)... {text[-100:]}"
    return text


# Each command's module, imported when that command runs (or a help lists the commands): a command registers itself
# on ``main`` when its module is imported. Importing all of them up front (polyhedral, compile, embed, ...) cost
# about 0.4 s of CPU before any command began. A new command module gets a line here.
COMMAND_MODULES = {
    "arch": "arch_cmd",
    "codegen": "codegen_cmd",
    "compile": "compile_cmd",
    "dse": "dse_cmd",
    "embed": "embed_cmd",
    "evaluate": "evaluate_cmd",
    "export-timeloop": "timeloop_cmd",
    "import": "import_cmd",
    "map": "map_cmd",
    "match": "match_cmd",
    "poly": "poly_cmd",
    "simulate": "simulate_cmd",
    "tune": "tune_cmd",
    "vectorize": "vectorize_cmd",
}


class _Group(click.Group):
    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(COMMAND_MODULES))

    def get_command(self, ctx, name):
        if name not in self.commands and name in COMMAND_MODULES:
            importlib.import_module(f"accelmap.cli.{COMMAND_MODULES[name]}")
        return super().get_command(ctx, name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except AccelmapError as e:
            click.echo(f"error: {one_line(str(e))}", err=True)
            sys.exit(2)
        except click.UsageError as e:
            # A bad option or argument: one line too, with where to look, instead of click's usage block.
            if type(e).__name__ == "NoArgsIsHelpError":   # a bare group: click prints its help
                raise
            path = e.ctx.command_path if e.ctx is not None else ctx.command_path
            click.echo(f"error: {one_line(e.format_message())} (see '{path} --help')", err=True)
            sys.exit(e.exit_code)


@click.group(cls=_Group)
@click.version_option(package_name="accelmap")
def main() -> None:
    """Map DNN operators onto hardware accelerators."""
