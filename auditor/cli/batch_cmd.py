"""``txn-audit batch``: the scheduled, incremental audit into Delta tables."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from auditor.report.console import err, safe
from auditor.cli.ingest_cmd import EXPECTED_INPUT, BadInput, verbose_option
from auditor.cli.audit_cmd import max_timeout_given
from auditor.cli.metrics_option import metrics_option
from auditor.engine.rule import SEVERITIES

if TYPE_CHECKING:  # pragma: no cover
    from auditor.batch.job import BatchResult
    from auditor.report.metrics import MetricsRun


@click.command("batch")
@click.option("--input", "inputs", multiple=True, required=True, metavar="DIR_OR_URI",
              help="Broker log dir, a dir holding several, a partition dir or a file: a local path, or a file:, hdfs:// or "
                   "s3a:// URI (repeatable; see docs/operations.md).")
@click.option("--remote-store", "remote_stores", multiple=True, metavar="PATH",
              help="Tiered storage: the remote store (LocalTieredStorage layout) whose segments complete the "
                   "partitions' logs (repeatable; read like another --input).")
@click.option("--warehouse", required=True, metavar="PATH",
              help="Where the Delta tables live (local path or a Hadoop URI such as s3a://bucket/txn-audit).")
@click.option("--master", default=None, help="Spark master URL (default: embedded local[*]; spark://host:7077 for a cluster).")
@click.option("--conf", "confs", multiple=True, help="Spark setting key=value (repeatable).")
@click.option("--split-mb", default=128, show_default=True, help="Split segments larger than this into byte-range tasks.")
@click.option("--rule", "rules", multiple=True, metavar="ID",
              help="Only these rules (repeatable; default all). Findings of other rules are left as they are.")
@click.option("--max-timeout-ms", default=900_000, show_default=True, help="The brokers' transaction.max.timeout.ms.")
@click.option("--allow-empty-input", is_flag=True,
              help="Accept an input that lost all its files since the last run (default: refuse, it looks unmounted).")
@click.option("--fail-on", type=click.Choice(["never", *SEVERITIES]), default="never", show_default=True,
              help="Exit 1 when an open finding of the run has at least this severity (default: findings are data, "
                   "exit 0; query the findings table to alert).")
@click.option("--quiet", "-q", is_flag=True, help="No progress messages on stderr.")
@verbose_option
@metrics_option
def batch_cmd(inputs, remote_stores, warehouse, master, confs, split_mb, rules, max_timeout_ms, allow_empty_input, fail_on,
              quiet, metrics) -> None:
    """Decode what is new under the inputs into Delta tables, run every rule, and
    merge the findings into a history table.

    Incremental: a file is decoded again only when its size, mtime or content
    fingerprint changed; vanished files' rows are removed. Idempotent: a run
    killed at any point is resumed by the next invocation and leaves the tables
    exactly as one clean run. Prints a one-line JSON summary of the run on stdout.

    \b
    Examples:
      txn-audit batch --input /var/lib/kafka/data --warehouse /srv/txn-audit
      txn-audit batch --input /mnt/b1 --input /mnt/b2 --warehouse /shared/wh \\
          --master spark://spark-master:7077
      txn-audit batch --input /var/lib/kafka/data --warehouse wh --fail-on critical
      txn-audit batch --input /var/lib/kafka/data --warehouse wh \\
          --metrics /var/lib/prometheus/node-exporter/txn_audit.prom

    \b
    Exit status: 0 the run completed (findings are data, see the findings
    table) and, with --fail-on SEV, no open finding at or above SEV; 1 some
    (the run completed all the same); 2 usage error, a missing or emptied input
    (nothing is written), or Delta Lake not available; 3 another run holds the
    warehouse's lock (a local or mounted warehouse: runs never overlap; nothing
    is read or written).
    """
    from auditor.batch import crash

    crash.prepare()  # before the JVM starts (test hook; no-op unless TXN_AUDIT_CRASH_AT is set)
    inputs = tuple(inputs) + tuple(remote_stores)  # tiered storage: read like another input
    from auditor.batch.deltaio import DeltaUnavailable
    from auditor.batch.job import InputError, run_batch
    from auditor.batch.lock import WarehouseBusy
    from auditor.spark.session import get_spark
    from auditor.engine.context import AuditOptions

    conf = _checked_arguments(inputs, confs, rules)
    spark = get_spark(master, conf, app_name="txn-audit-batch")

    def progress(msg: str) -> None:
        if not quiet:
            err.print(f"[dim]{safe(msg)}[/dim]")

    try:
        result = run_batch(spark, list(inputs), warehouse, split_bytes=split_mb * 1024 * 1024,
                           options=AuditOptions(transaction_max_timeout_ms=max_timeout_ms,
                                                transaction_max_timeout_given=max_timeout_given()),
                           only=list(rules),
                           allow_empty_input=allow_empty_input, progress=progress)
    except (DeltaUnavailable, InputError) as exc:
        err.print(f"[red]error:[/red] {safe(exc)}")
        sys.exit(2)
    except WarehouseBusy as exc:
        err.print(f"[red]error:[/red] {safe(exc)}")
        metrics.skipped()  # the run that holds the lock writes the file
        sys.exit(3)
    if not quiet:
        for f in result.bad_files:
            pos = f"byte {f['error_position']}" if f["error_position"] is not None else "whole file"
            err.print(f"[yellow]{safe(f['status'])}[/yellow] {safe(f['path'])} at {pos}: "
                      f"{safe(f['error_message'] or f['note'] or '')}")
    if metrics.path:
        _record(spark, metrics, result, max_timeout_ms)
    sys.stdout.write(json.dumps(result.summary()) + "\n")  # one line: appendable to a .jsonl log
    if fail_on != "never":
        from auditor.report.model import fails

        sys.exit(1 if fails(result.findings, fail_on) else 0)


def _record(spark, metrics: MetricsRun, result: BatchResult, max_timeout_ms: int) -> None:
    """``--metrics``: what is open in the warehouse's findings table now (also the findings of
    rules this run did not evaluate, which it left open), every cluster of its ledger, every
    rule's kinds."""
    from auditor.batch.history import open_findings
    from auditor.batch.job import paths
    from auditor.engine.rule import discover
    from auditor.report.metrics import Outcome

    findings = open_findings(spark, paths(result.warehouse)["findings"])
    metrics.succeeded(Outcome(findings, result.clusters, discover(), result.files_decoded, max_timeout_ms))


def _checked_arguments(inputs, confs, rules) -> dict:
    """The Spark conf, once the arguments are known good: a usage error (status 2) for a bad --conf
    or --rule, a missing local input reported before the JVM starts (remote inputs are looked at by
    the run, which writes nothing when they are missing)."""
    import os

    from auditor.batch.job import input_path
    from auditor.engine.rule import discover
    from auditor.engine.runner import select_rules
    from auditor.ingest.storage import is_remote
    from auditor.spark.session import parse_conf

    try:
        conf = parse_conf(confs)
        roots = [input_path(i) for i in inputs]
        select_rules(discover(), rules)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    gone = [given for given, root in zip(inputs, roots) if not is_remote(root) and not os.path.exists(root)]
    if gone:
        raise BadInput("; ".join(f"--input {g}: does not exist" for g in gone) + f". Expected: {EXPECTED_INPUT[9:]}.")
    return conf
