"""Command line: ``accelmap <command>``. Each command lives in its own module.

User errors (AccelmapError, and click's usage errors) print one line and exit
with status 2; anything else is our bug and keeps its traceback.
"""

from __future__ import annotations

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


class _Group(click.Group):
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


# Commands register themselves on import; keep one line per command module.
from accelmap.cli import (
    arch_cmd,  # noqa: E402,F401
    codegen_cmd,  # noqa: E402,F401
    compile_cmd,  # noqa: E402,F401
    dse_cmd,  # noqa: E402,F401
    embed_cmd,  # noqa: E402,F401
    evaluate_cmd,  # noqa: E402,F401
    import_cmd,  # noqa: E402,F401
    map_cmd,  # noqa: E402,F401
    match_cmd,  # noqa: E402,F401
    poly_cmd,  # noqa: E402,F401
    simulate_cmd,  # noqa: E402,F401
    timeloop_cmd,  # noqa: E402,F401
    tune_cmd,  # noqa: E402,F401
    vectorize_cmd,  # noqa: E402,F401
)
