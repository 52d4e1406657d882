"""Progress bars for the long stages of ``scan`` / ``audit`` (decoding, rules).

Bars go to stderr and only when stderr is a terminal: piped or redirected
output (CI logs, ``2> file``) stays free of redraw sequences, and ``--quiet``
turns them off everywhere. The engine reports progress through plain
``(name, i, n)`` callbacks, so it stays unaware of rich.
"""

from __future__ import annotations

from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from auditor.cli.console import safe


class StageProgress:
    """``with StageProgress(err, enabled) as p: ingest(..., progress=p.stage("decoding"))``."""

    def __init__(self, console: Console, enabled: bool) -> None:
        self.enabled = enabled and console.is_terminal
        self._progress = Progress(
            TextColumn("[bold]{task.fields[stage]:<9}[/bold]"), BarColumn(bar_width=30), MofNCompleteColumn(),
            TextColumn("{task.fields[item]}", markup=False), TimeElapsedColumn(), console=console, transient=False,
        ) if self.enabled else None
        self._tasks: dict[str, int] = {}

    def __enter__(self) -> "StageProgress":
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            for tid in self._tasks.values():
                task = self._progress.tasks[tid]
                if task.total is not None and not exc[0]:
                    self._progress.update(tid, completed=task.total, item="done")
            self._progress.stop()

    def stage(self, name: str) -> Callable[[str, int, int], None] | None:
        """A ``(item, i, n)`` callback advancing the bar of stage ``name`` (None when disabled)."""
        if self._progress is None:
            return None
        progress = self._progress

        def update(item: str, i: int, n: int) -> None:
            if name not in self._tasks:
                self._tasks[name] = progress.add_task(name, total=n, stage=name, item="")
            # item i is starting: i of n are done (the item column is plain text, never markup)
            progress.update(self._tasks[name], total=n, completed=i, item=safe(item, markup=False))

        return update
