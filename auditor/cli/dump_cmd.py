"""``txn-audit dump``: the click command. What it does is :mod:`auditor.cli.dump_run`
(click-free, so a plain ``txn-audit dump FILE`` starts without click: see
:func:`auditor.cli.main.main`)."""

from __future__ import annotations

import click

# the per-object path and its helpers, where tests and callers have always found them
from auditor.cli.dump_run import (  # noqa: F401
    _TABLE_COLUMNS,
    _fast_items,
    _json_default,
    _objects,
    _problem,
    _records,
    _table_objects,
    run,
)


@click.command("dump")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["jsonl", "table"]), default="jsonl", show_default=True)
@click.option("--records", is_flag=True, help="Also one object per record (decoded for internal topics).")
def dump_cmd(files, fmt, records) -> None:
    """Decode FILES (segments, snapshots, indexes, checkpoints) to JSON lines or a table.

    Problems go to stderr with path and byte position; exit status 1 if any.
    """
    run(files, fmt, records)
