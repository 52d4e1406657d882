"""``txn-audit dump``: the click command, a thin layer over :func:`auditor.dump.run`
(click-free, so a plain ``txn-audit dump FILE`` starts without click: see
:func:`auditor.cli.main.main`)."""

from __future__ import annotations

import click

from auditor.dump import run


@click.command("dump")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["jsonl", "table"]), default="jsonl", show_default=True)
@click.option("--records", is_flag=True,
              help="Also the records, control records (markers) included: one object each, or lines under "
                   "their batch in a table (decoded for internal topics).")
def dump_cmd(files, fmt, records) -> None:
    """Decode FILES (segments, snapshots, indexes, checkpoints) to JSON lines or a table.

    Every JSON object ends with its file and, for a file of a partition directory, its topic and
    partition (``log_topic`` / ``log_partition`` where the record has its own: a committed offset).

    Problems go to stderr with path and byte position; exit status 1 if any.
    """
    run(files, fmt, records)
