"""``txn-audit ingest`` and ``txn-audit tables``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.table import Table

from auditor.report.console import err, out, safe


EXPECTED_INPUT = ("expected a broker log dir, a directory holding several, a partition dir (topic-N) or a Kafka "
                  "file (.log, .index, .snapshot, checkpoint), as a local path or a file:, hdfs:// or s3a:// URI")


class BadInput(click.ClickException):
    """Input that cannot be used (missing, empty, nothing readable): exit status 2, before Spark starts."""

    exit_code = 2


def verbose_option(f):
    """``-v/--verbose``: Spark's and the JVM's log lines on stderr (auditor.spark.session)."""
    def on(_ctx, _param, value):
        if value:
            from auditor.spark.session import set_verbose

            set_verbose(True)
        return value

    return click.option("--verbose", "-v", is_flag=True, expose_value=False, callback=on,
                        help="Show Spark's and the JVM's log lines on stderr (default: a log file, named on failure).")(f)


def check_inputs(inputs: list[str], plan) -> None:
    """Raise :class:`BadInput` (before Spark starts) when no input holds a file this tool decodes:
    the message names each input given, what was found there (does not exist, cannot be read,
    empty, no Kafka file) and what is expected. An input that is missing beside others that are
    not is reported with the files (status ``missing``), as before."""
    from auditor.ingest.storage import normalize

    if plan.tasks:
        return
    found = []
    for given in dict.fromkeys(inputs):
        root = normalize(given)
        under = [fi for fi in plan.files if fi.input_root == root]
        top = next((fi for fi in under if fi.path == root and fi.kind in ("missing", "unreadable-dir")), None)
        if top is not None and top.kind == "missing":
            found.append(f"{given}: does not exist")
        elif top is not None:
            found.append(f"{given}: cannot be read ({top.note or 'no permission'})")
        elif not under or all(fi.kind == "empty-dir" for fi in under):
            found.append(f"{given}: empty directory, no file in it")
        elif len(under) == 1 and under[0].path == root and under[0].note:  # a file given alone, e.g. an archive
            found.append(f"{given}: {under[0].note}")
        else:
            names = sorted({fi.path.rsplit("/", 1)[-1] for fi in under})
            found.append(f"{given}: {len(under)} file{'s' if len(under) != 1 else ''}, none a Kafka file this tool "
                         f"decodes ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})")
    raise BadInput("no input file was readable: " + "; ".join(found) + f". {EXPECTED_INPUT[0].upper()}{EXPECTED_INPUT[1:]}.")


def input_uris(_ctx, _param, value: tuple[str, ...]) -> tuple[str, ...]:
    """click callback: every input a local path or a file:, hdfs:// or s3a:// URI."""
    from auditor.ingest.storage import normalize

    for v in value:
        try:
            normalize(v)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return value


def remote_store_option(f):
    """``--remote-store PATH``: a tiered-storage (KIP-405) remote store's copy, read with the log dirs
    (auditor.ingest.remote_store: LocalTieredStorage's layout, local or hdfs:// / s3a://); the
    remote segments join the log of their partition's replica in the input."""
    return click.option("--remote-store", "remote_stores", multiple=True, type=click.Path(), callback=input_uris,
                        metavar="PATH", help="Tiered storage: the remote store (LocalTieredStorage layout) whose "
                                             "segments complete the partitions' logs (repeatable).")(f)


@click.command("ingest")
@click.argument("logdirs", nargs=-1, required=True, type=click.Path(), callback=input_uris)
@remote_store_option
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory for the Parquet tables (replaced atomically).")
@click.option("--master", default=None, help="Spark master URL (default: embedded local[*]).")
@click.option("--conf", "confs", multiple=True, help="Spark setting key=value (repeatable).")
@click.option("--table", "tables", multiple=True, help="Only build these tables (repeatable).")
@click.option("--split-mb", default=128, show_default=True, help="Split segments larger than this into byte-range tasks (needs the .index).")
@click.option("--quiet", "-q", is_flag=True, help="No progress or per-file messages on stderr.")
@verbose_option
def ingest_cmd(logdirs, remote_stores, out_dir, master, confs, tables, split_mb, quiet) -> None:
    """Decode broker log directories (several brokers allowed) into Parquet tables.

    LOGDIRS are local paths or file:, hdfs:// or s3a:// URIs (docs/operations.md).

    Every file found is listed in the `files` table with its status; each bad
    file is also reported on stderr with path and byte position. Prints a JSON
    summary on stdout.

    \b
    Examples:
      txn-audit ingest /var/lib/kafka/data --out tables
      txn-audit ingest broker-1/ broker-2/ --out tables && txn-audit audit tables
      txn-audit ingest hdfs://nn:8020/kafka/data --out tables --table batches

    \b
    Exit status: 0 all inputs clean; 1 some input files damaged (the rest was
    decoded); 2 usage error, an input missing or holding nothing readable
    (checked before Spark starts), or --out cannot be written (nothing in it
    is replaced).
    """
    from auditor.cli.progress import StageProgress
    from auditor.ingest.spark_job import check_output, decodes_locally, ingest, small_plan
    from auditor.spark.session import get_spark, parse_conf
    from auditor.ingest.plan import make_plan
    from auditor.ingest.tables import TABLES

    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        raise click.UsageError(f"unknown table(s): {', '.join(unknown)}; known: {', '.join(TABLES)}")
    check_output(out_dir)  # before Spark starts
    try:
        conf = parse_conf(confs)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    split_bytes = split_mb * 1024 * 1024
    logdirs = tuple(logdirs) + tuple(remote_stores)
    plan = make_plan(list(logdirs), split_bytes)  # before Spark: its size chooses the session's settings
    check_inputs(list(logdirs), plan)
    # local files under a local master: the local decode writes every table, no JVM to start
    spark = None if decodes_locally(plan, master) else get_spark(master, conf, delta=False,
                                                                 small_input=small_plan(plan))
    with StageProgress(err, not quiet) as prog:
        result = ingest(spark, list(logdirs), out_dir, tables=list(tables) or None,
                        split_bytes=split_bytes, progress=prog.ingest(plan), plan=plan)
    bad = result.bad_files
    if not quiet:
        for f in bad:
            pos = f"byte {f['error_position']}" if f["error_position"] is not None else "whole file"
            err.print(f"[yellow]{safe(f['status'])}[/yellow] {safe(f['path'])} at {pos}: {safe(f['error_message'] or f['note'] or '')}")
    summary = {"out": result.out, "run_id": result.run_id, "seconds": round(result.seconds, 2),
               "tables": result.table_rows, "files": len(result.files), "bad_files": len(bad)}
    out.print_json(json.dumps(summary))
    readable = [f for f in result.files if f["status"] not in ("unreadable", "skipped", "foreign")]
    if not readable:
        err.print("[red]error:[/red] no input file was readable (see the files table in "
                  f"{safe(result.out)}); {EXPECTED_INPUT}")
        sys.exit(2)
    sys.exit(1 if bad else 0)


@click.command("tables")
@click.argument("tables_dir", type=click.Path(exists=True, file_okay=False))
def tables_cmd(tables_dir) -> None:
    """Summarise an ingested tables directory: rows per table, files by status.

    \b
    Examples:
      txn-audit tables tables/
      txn-audit tables ~/.cache/txn-audit/tables/3f2a...   # what a scan kept
    """
    import pyarrow.compute as pc

    from auditor.tables.source import arrow_dataset

    root = Path(tables_dir)
    t = Table(title=f"tables in {safe(root)}")
    t.add_column("table")
    t.add_column("rows", justify="right")
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        t.add_row(safe(d.name), str(arrow_dataset(root, d.name).count_rows()))
    out.print(t)
    inventory = arrow_dataset(root, "files")
    if inventory is None:
        raise click.UsageError(f"{root}: no files table (not a tables directory written by ingest, scan or the batch job)")
    files = inventory.to_table(columns=["status", "kind"])
    st = Table(title="files by status")
    st.add_column("status")
    st.add_column("files", justify="right")
    for row in pc.value_counts(files["status"]).to_pylist():
        st.add_row(safe(row["values"]), str(row["counts"]))
    out.print(st)
    _print_not_live(root)


def _print_not_live(root: Path, limit: int = 50) -> None:
    """Files the rules leave out of the live log (auditor.model.livelog), and why."""
    from auditor.model.livelog import decide_for_tables

    live = decide_for_tables(root) or {}
    odd = sorted((lv for lv in live.values() if not lv.live or lv.bounded), key=lambda lv: lv.path)
    if not odd:
        out.print("live log: every file is live")
        return
    t = Table(title=f"not (wholly) in the live log: {len(odd)} files")
    t.add_column("file")
    t.add_column("why")
    for lv in odd[:limit]:
        t.add_row(safe(lv.path), safe(lv.reason or ""))
    out.print(t)
    if len(odd) > limit:
        out.print(f"... and {len(odd) - limit} more")
