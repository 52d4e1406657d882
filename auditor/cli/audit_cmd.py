"""``txn-audit audit``, ``scan``, ``rules`` and ``explain``.

``scan`` and ``audit`` report through the same renderers, filters and exit
status as ``txn-audit report`` (auditor/cli/report_cmd.py).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import click
from rich.markdown import Markdown
from rich.table import Table

from auditor.cli.console import err, out, safe, wide
from auditor.cli.ingest_cmd import input_uris
from auditor.cli.progress import StageProgress
from auditor.cli.report_cmd import InputError, emit_report, exit_with, make_filters, report_options
from auditor.engine.rule import discover
from auditor.report import from_audit


AS_OF_FORMATS = "epoch ms, 'now' or ISO-8601 (2026-11-25T18:00:00Z)"


def parse_as_of(text: str, now_ms: int | None = None) -> int:
    """``--as-of`` as epoch ms: epoch milliseconds, ``now`` (the wall clock, or ``now_ms``)
    or ISO-8601 (``2026-11-25T18:00:00Z``, ``2026-11-25T18:00:00+01:00``; a date alone is
    midnight UTC, a time without an offset is UTC). ``ValueError`` for anything else."""
    from auditor.report.model import parse_time

    s = str(text).strip()
    if s.lower() == "now":
        return time.time_ns() // 1_000_000 if now_ms is None else int(now_ms)
    try:
        return parse_time(s)
    except ValueError:
        raise ValueError(f"expected {AS_OF_FORMATS}, got {text!r}") from None


class AsOf(click.ParamType):
    """``--as-of``: see :func:`parse_as_of`."""

    name = "MS|now|ISO-8601"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return parse_as_of(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _options(as_of, max_timeout_ms):
    from auditor.engine.views import AuditOptions

    return AuditOptions(as_of_ms=as_of, transaction_max_timeout_ms=max_timeout_ms)


def _spark(master, confs, small_input: bool = False):
    from auditor.engine.session import get_spark, parse_conf

    try:
        conf = parse_conf(confs)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    return get_spark(master, conf, delta=False, small_input=small_input)  # Parquet tables only


def _small_tables(tables: str) -> bool:
    """Is the ingested dump small enough for the small-input settings (auditor.engine.tuning)?"""
    import json

    from auditor.engine.tuning import small_audit

    try:
        rows = json.loads((Path(tables) / "_ingest.json").read_text()).get("tables", {})
        return small_audit(rows)
    except (OSError, ValueError, AttributeError):
        return False


def _run_audit(spark, tables, rules, as_of, max_timeout_ms, findings_out, progress):
    from auditor.engine.audit import audit

    try:
        return audit(spark, tables, options=_options(as_of, max_timeout_ms), only=list(rules), out=findings_out,
                     progress=progress, report=True)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _check_outputs(*dirs: str | None) -> None:
    """An output directory that cannot be written fails now, not after the decode and the rules."""
    from auditor.engine.ingest_job import check_output

    for d in dirs:
        if d:
            check_output(d)


def _report(res, rules, fmt, fail_on, bootstrap_server, filter_opts, source=None) -> None:
    """Render the audit's findings like `txn-audit report` does, then exit with its status."""
    if res.report_error:
        err.print(f"[yellow]warning[/yellow]: no run summary or charts: {safe(res.report_error)}")
    report = from_audit(res, make_filters(rules=rules, **filter_opts), bootstrap_server, source=source)
    emit_report(report, fmt)
    exit_with(report, fail_on)


_common = [
    click.option("--master", default=None, help="Spark master URL (default: embedded local[*])."),
    click.option("--conf", "confs", multiple=True, help="Spark setting key=value (repeatable)."),
    click.option("--rule", "rules", multiple=True, help="Only these rule ids (repeatable)."),
    click.option("--as-of", type=AsOf(), default=None,
                 help="Reference time for ages: epoch ms, 'now' (the wall clock) or ISO-8601, e.g. 2026-11-25T18:00:00Z, "
                      "2026-11-25T18:00:00+01:00, 2026-11-25 (midnight UTC; no offset means UTC). "
                      "Default: the newest timestamp in each cluster's dump."),
    click.option("--max-timeout-ms", type=int, default=900_000, show_default=True, help="The cluster's transaction.max.timeout.ms."),
    click.option("--quiet", "-q", is_flag=True, help="No progress bars or per-file messages on stderr."),
]


def common(f):
    f = report_options(f)
    for opt in reversed(_common):
        f = opt(f)
    return f


def _looks_like_tables(path: Path) -> bool:
    return (path / "_ingest.json").is_file() or (path / "batches").is_dir()


@click.command("audit")
@click.argument("tables", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "findings_out", type=click.Path(file_okay=False), default=None,
              help="Write the findings directory here (Parquet + run summary; render later with `txn-audit report`).")
@common
def audit_cmd(tables, findings_out, master, confs, rules, as_of, max_timeout_ms, quiet, fmt, fail_on,
              bootstrap_server, **filter_opts) -> None:
    """Run the rules over ingested TABLES and report the findings.

    Filters (--topic, --severity, ...) choose what the report shows; --out
    always keeps every finding. Exit status: 0 no reported finding at or above
    --fail-on, 1 some, 2 bad usage, TABLES is not an ingested directory or --out
    cannot be written.
    """
    if not _looks_like_tables(Path(tables)):
        raise InputError(f"{tables}: not an ingested tables directory (no _ingest.json or batches/); "
                         "build one with `txn-audit ingest LOGDIR --out DIR`")
    make_filters(rules=rules, **filter_opts)  # bad filter values fail before Spark starts
    _check_outputs(findings_out)
    spark = _spark(master, confs, small_input=_small_tables(tables))
    with StageProgress(err, not quiet) as prog:
        res = _run_audit(spark, tables, rules, as_of, max_timeout_ms, findings_out, prog.stage("rules"))
    if not quiet:
        for rule, why in res.skipped.items():
            err.print(f"[yellow]skipped {safe(rule)}[/yellow]: {safe(why)}")
    _report(res, rules, fmt, fail_on, bootstrap_server, filter_opts, source=findings_out)


@click.command("scan")
@click.argument("logdirs", nargs=-1, required=True, type=click.Path(), callback=input_uris)
@click.option("--tables", "tables_dir", type=click.Path(file_okay=False), default=None,
              help="Keep the ingested tables here (default: a temporary directory).")
@click.option("--out", "findings_out", type=click.Path(file_okay=False), default=None,
              help="Write the findings directory here (Parquet + run summary; render later with `txn-audit report`).")
@common
def scan_cmd(logdirs, tables_dir, findings_out, master, confs, rules, as_of, max_timeout_ms, quiet, fmt, fail_on,
             bootstrap_server, **filter_opts) -> None:
    """One shot: ingest LOGDIRS, run every rule, report the findings.

    LOGDIRS are local paths or file:, hdfs:// or s3a:// URIs (docs/operations.md).

    Exit status: 0 no reported finding at or above --fail-on, 1 some, 2 bad
    usage, no input file was readable at all, or --tables/--out cannot be written.
    """
    from auditor.engine.ingest_job import ingest, small_plan
    from auditor.ingest.plan import make_plan

    make_filters(rules=rules, **filter_opts)  # bad filter values fail before Spark starts
    _check_outputs(tables_dir, findings_out)
    plan = make_plan(list(logdirs))  # before Spark: its size chooses the session's settings
    spark = _spark(master, confs, small_input=small_plan(plan))
    with tempfile.TemporaryDirectory(prefix="txn-audit-") as tmp, StageProgress(err, not quiet) as prog:
        tdir = tables_dir or str(Path(tmp) / "tables")
        res_in = ingest(spark, list(logdirs), tdir, progress=prog.stage("decoding"), plan=plan)
        if not quiet:
            for f in res_in.bad_files:
                pos = f"byte {f['error_position']}" if f["error_position"] is not None else "whole file"
                err.print(f"[yellow]{safe(f['status'])}[/yellow] {safe(f['path'])} at {pos}: {safe(f['error_message'] or f['note'] or '')}")
        readable = [f for f in res_in.files if f["status"] not in ("unreadable", "skipped", "foreign")]
        if not readable:
            raise InputError("no input file was readable: " + ", ".join(
                f"{f['path']} ({f['status']}{': ' + f['note'] if f.get('note') else ''})" for f in res_in.files[:5]))
        res = _run_audit(spark, tdir, rules, as_of, max_timeout_ms, findings_out, prog.stage("rules"))
    _report(res, rules, fmt, fail_on, bootstrap_server, filter_opts, source=findings_out)


@click.command("rules")
def rules_cmd() -> None:
    """List the rule catalog: id, severity, title."""
    t = Table(title="txn-audit rules")
    for c in ("id", "severity", "title", "proposals"):
        t.add_column(c)
    for r in discover():
        t.add_row(r.id, r.severity, safe(r.title), ", ".join(r.proposals))
    wide().print(t)


@click.command("explain")
@click.argument("rule")
def explain_cmd(rule) -> None:
    """Print a rule's full documentation."""
    rules = {r.id: r for r in discover()}
    if rule not in rules:
        raise click.UsageError(f"unknown rule {rule!r}; see `txn-audit rules`")
    from rich.console import Console

    from auditor.report.rule_docs import rule_markdown

    # wrapped to the terminal (80 columns when piped): the shared console does not wrap, and would crop
    Console(highlight=False).print(Markdown(rule_markdown(rules[rule])))
