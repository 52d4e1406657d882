"""``--metrics FILE`` of ``scan`` and ``batch``: the run's results as a Prometheus textfile.

Why a decorator: whether the run succeeded is known only where the command ends, and a
failure may be any exit (a usage error, a missing input, an exception, Ctrl-C). Wrapping the
command's body in :func:`auditor.report.metrics.recording` catches every one of them, so no
command has to remember to write the failure file on each of its error paths.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

HELP = ("Write the run's results to FILE as Prometheus metrics (text exposition, replaced atomically; for "
        "node_exporter's textfile collector, name it DIR/txn_audit.prom). A failed run keeps the last "
        "successful run's values and sets txn_audit_run_success 0. See docs/operations.md.")


def metrics_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--metrics FILE`` to ``command`` and run its body under the metrics recorder: the body
    gets ``metrics`` (a :class:`~auditor.report.metrics.MetricsRun`) and calls ``succeeded``."""

    @functools.wraps(command)
    def wrapper(*args: Any, metrics_path: str | None = None, **kwargs: Any) -> Any:
        from auditor.report.metrics import recording

        with recording(metrics_path) as run:
            return command(*args, metrics=run, **kwargs)

    return click.option("--metrics", "metrics_path", type=click.Path(dir_okay=False), default=None,
                        metavar="FILE", help=HELP)(wrapper)
