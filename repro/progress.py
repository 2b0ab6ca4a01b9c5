"""Rich progress bars for long work (quiet when not on a terminal or when LNREPRO_QUIET is set)."""

from __future__ import annotations

import os
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

# Markup off: every message may hold user text (a path, a recipe value), printed as it is.
console = Console(stderr=True, markup=False, highlight=False)


class _Bar:
    def __init__(self, progress: Progress | None, task):
        self.progress, self.task = progress, task

    def advance(self, n: float = 1) -> None:
        if self.progress is not None:
            self.progress.advance(self.task, n)

    def update(self, **fields) -> None:
        if self.progress is not None:
            self.progress.update(self.task, **fields)


# The time left is estimated from the pace of the last ten minutes, not rich's default 30 seconds, over which a
# validation pass or a checkpoint swings it several-fold.
ETA_WINDOW_S = 600.0


@contextmanager
def progress_bar(description: str, total: float | None, status: str = ""):
    if os.environ.get("LNREPRO_QUIET"):
        yield _Bar(None, None)
        return
    with Progress(TextColumn("{task.description}", style="bold", markup=False), BarColumn(bar_width=10), MofNCompleteColumn(),
                  TimeRemainingColumn(), TextColumn("{task.fields[status]}"),
                  console=console, transient=False, disable=not console.is_terminal and total is None,
                  speed_estimate_period=ETA_WINDOW_S) as p:
        task = p.add_task(description, total=total, status=status)
        yield _Bar(p, task)
