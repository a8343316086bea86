"""Ending a long command cleanly on Ctrl-C or SIGTERM: one line saying what is kept, exit 130 or 143."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that the work unwinds as for Ctrl-C."""


def _terminate(signum, frame) -> None:
    raise Terminated()


@contextmanager
def stop_cleanly(store: Path | str | None, kept: str) -> Iterator[None]:
    """SIGTERM (a job scheduler, `kill`) ends the run like Ctrl-C: worker processes are stopped (without
    this they outlived the parent), and the user is told that ``kept`` are in ``store`` to resume from."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    except (KeyboardInterrupt, Terminated) as e:
        done = f"; {kept} are in {store}, run the same command again to resume" if store else ""
        click.echo(f"{'terminated' if isinstance(e, Terminated) else 'interrupted'}{done}", err=True)
        sys.exit(143 if isinstance(e, Terminated) else 130)
    finally:
        signal.signal(signal.SIGTERM, previous)
