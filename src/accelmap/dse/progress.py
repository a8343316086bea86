"""The progress bar of a sweep, with designs done, elapsed time and an ETA: rich, on stderr, or nothing."""

from __future__ import annotations


class SweepProgress:
    def __init__(self, enabled: bool, total: int, label: str):
        self.bar = None
        if enabled and total:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                TextColumn("{task.fields[last]}"), console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task(label, total=total, last="")
            self.bar.start()

    def advance(self, last: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, last=last[:60])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
