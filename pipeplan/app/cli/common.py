"""Helpers shared by the command modules of the CLI."""
from __future__ import annotations

import sys


class progress:
    """A rich progress line on stderr; silent when stderr is not a terminal."""

    def __init__(self, label: str):
        self.label = label
        self.bar = None

    def __enter__(self):
        if not sys.stderr.isatty():
            return self
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                            TimeElapsedColumn(), transient=True,
                            console=__import__("rich.console", fromlist=["Console"]).Console(stderr=True))
        self.bar.__enter__()
        self.task = self.bar.add_task(self.label, total=None)
        return self

    def __call__(self, done: int, total: int | None, what: str = "") -> None:
        if self.bar is None:
            return
        self.bar.update(self.task, completed=done, total=total,
                        description=f"{self.label} {what}" if what else self.label)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)
        return False
