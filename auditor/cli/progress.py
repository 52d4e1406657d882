"""Progress of the long phases of ``scan`` / ``ingest`` / ``audit``: decoding, writing, rules.

One line per phase, each with its own timer (a phase's clock stops when the next one
starts) and counts of what it measures: files done of total, their bytes and the
partitions they belong to for decoding; rules done of total for the rules.

Bars go to stderr and only when stderr is a terminal: piped or redirected
output (CI logs, ``2> file``) stays free of redraw sequences, and ``--quiet``
turns them off everywhere. The engine reports progress through plain
``(name, i, n)`` callbacks, so it stays unaware of rich.
"""

from __future__ import annotations

from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from auditor.report.console import safe


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def plan_measures(plan) -> dict:
    """What decoding ``plan`` reads: files, bytes and partitions (topic-partitions of any broker)."""
    from auditor.ingest.spark_job import input_bytes

    return {"files": len({t["path"] for t in plan.tasks}), "bytes": input_bytes(plan),
            "partitions": len({(t["topic"], t["partition"]) for t in plan.tasks if t["topic"] is not None})}


class StageProgress:
    """``with StageProgress(err, enabled) as p: ingest(..., progress=p.ingest(plan)); audit(..., progress=p.stage("rules"))``."""

    def __init__(self, console: Console, enabled: bool) -> None:
        self.enabled = enabled and console.is_terminal
        self._progress = Progress(
            TextColumn("[bold]{task.fields[stage]:<9}[/bold]"), BarColumn(bar_width=30),
            TextColumn("{task.fields[count]}", markup=False), TextColumn("{task.fields[item]}", markup=False),
            TimeElapsedColumn(), console=console, transient=False,
        ) if self.enabled else None
        self._tasks: dict[str, int] = {}
        self._units: dict[str, str] = {}

    def __enter__(self) -> "StageProgress":
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            if not exc[0]:
                for name in list(self._tasks):
                    self._finish(name)
            self._progress.stop()

    # -- phases -------------------------------------------------------------------------------

    def _start(self, name: str, total: int | None, count: str = "", unit: str = "") -> int:
        """Phase ``name`` starts: every other phase still running is done (its clock stops)."""
        assert self._progress is not None
        for other in list(self._tasks):
            if other != name:
                self._finish(other)
        if name not in self._tasks:
            self._tasks[name] = self._progress.add_task(name, total=total, stage=name, count=count, item="")
            self._units[name] = unit
        return self._tasks[name]

    def _finish(self, name: str) -> None:
        assert self._progress is not None
        tid = self._tasks.get(name)
        if tid is None:
            return
        task = self._progress.tasks[tid]
        if not task.finished:
            total = task.total if task.total is not None else 1
            unit = self._units.get(name, "")
            count = task.fields.get("count", "")
            if unit and task.total is not None:
                count = f"{int(total)}/{int(total)} {unit}"
            self._progress.update(tid, total=total, completed=total, count=count, item="done")
            self._progress.stop_task(tid)

    def stage(self, name: str, unit: str = "") -> Callable[[str, int, int], None] | None:
        """A ``(item, i, n)`` callback for phase ``name``: item ``i`` of ``n`` is starting
        (``unit``: what is counted, e.g. "rules"). None when disabled."""
        if self._progress is None:
            return None
        unit = unit or ("rules" if name == "rules" else "")
        progress = self._progress

        def update(item: str, i: int, n: int) -> None:
            tid = self._start(name, n, unit=unit)
            count = f"{i}/{n} {unit}".rstrip()
            # the item column is plain text, never markup
            progress.update(tid, total=n, completed=i, count=count, item=safe(item, markup=False))

        return update

    def ingest(self, plan) -> Callable[[str, int, int], None] | None:
        """The callback of :func:`auditor.ingest.spark_job.ingest` (``"decode"``, then ``"write"``):
        a decoding phase that counts the files, bytes and partitions of ``plan``, then a writing phase."""
        if self._progress is None:
            return None
        m = plan_measures(plan)
        progress = self._progress
        size = f"{human_bytes(m['bytes'])}, {m['partitions']} partitions"

        def update(step: str, i: int, n: int) -> None:
            if step == "decode":
                tid = self._start("decoding", m["files"] or 1)
                progress.update(tid, completed=0, count=f"0/{m['files']} files, {size}")
            else:  # "write": the decode is over, every file of the plan was read
                tid = self._tasks.get("decoding")
                if tid is not None:
                    progress.update(tid, completed=m["files"] or 1, count=f"{m['files']}/{m['files']} files, {size}",
                                    item="done")
                self._start("writing", None, count="tables")

        return update
