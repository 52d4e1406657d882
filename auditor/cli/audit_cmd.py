"""``txn-audit audit``, ``scan``, ``rules`` and ``explain``.

``scan`` and ``audit`` report through the same renderers, filters and exit
status as ``txn-audit report`` (auditor/cli/report_cmd.py).

Where ``scan`` keeps its tables and findings, and when it reuses them: :mod:`auditor.ingest.cache`.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from auditor.report.console import err, safe
from auditor.cli.ingest_cmd import check_inputs, input_uris, remote_store_option, verbose_option
from auditor.cli.metrics_option import metrics_option
from auditor.cli.progress import StageProgress
from auditor.cli.report_cmd import InputError, finish, make_filters, report_options
from auditor.engine.rule import discover
from auditor.ingest import cache
from auditor.report import from_audit, load_report

if TYPE_CHECKING:  # pragma: no cover
    from auditor.engine.runner import AuditResult
    from auditor.report.metrics import MetricsRun


AS_OF_FORMATS = "epoch ms, 'now' or ISO-8601 (2026-11-25T18:00:00Z)"


#: 2000-01-01T00:00:00Z: no Kafka log holds transactions from before it, and epoch *seconds* of any
#: instant since 1973 are below it when read as milliseconds (``date +%s`` prints seconds)
EARLIEST_AS_OF_MS = 946_684_800_000
FUTURE_SLACK_MS = 86_400_000  # how far past this machine's clock an instant may lie (clocks drift)


def parse_as_of(text: str, now_ms: int | None = None) -> int:
    """``--as-of`` as epoch ms: epoch milliseconds, ``now`` (the wall clock, or ``now_ms``)
    or ISO-8601 (``2026-11-25T18:00:00Z``, ``2026-11-25T18:00:00+01:00``; a date alone is
    midnight UTC, a time without an offset is UTC). ``ValueError`` for anything else, and for
    instants no audit means: before 2000 (epoch seconds taken for milliseconds: the message gives
    the value in milliseconds) or more than a day after this machine's clock -- ages against
    them decide hanging against undetermined, so a wrong unit must not pass silently."""
    from auditor.report.model import parse_time

    s = str(text).strip()
    now = time.time_ns() // 1_000_000 if now_ms is None else int(now_ms)
    if s.lower() == "now":
        return now
    try:
        ms = parse_time(s)
    except ValueError:
        raise ValueError(f"expected {AS_OF_FORMATS}, got {text!r}") from None
    _check_instant(ms, s, now)
    return ms


def _check_instant(ms: int, text: str, now: int) -> None:
    """Refuse an ``--as-of`` instant before 2000 or more than a day in the future (see :func:`parse_as_of`)."""
    from auditor.report.model import format_time

    if ms < EARLIEST_AS_OF_MS:
        hint = ""
        if EARLIEST_AS_OF_MS // 1000 <= ms < 10**10:  # epoch seconds from 2000 to 2286
            hint = f"; it looks like epoch seconds: use {ms * 1000} ({format_time(ms * 1000)})"
        raise ValueError(f"{text!r} is {format_time(ms)} as epoch ms, before 2000{hint}")
    if ms > now + FUTURE_SLACK_MS:
        raise ValueError(f"{text!r} is {format_time(ms)}, more than a day after this machine's clock "
                         f"({format_time(now)}); for the present use 'now'")


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


def max_timeout_given() -> bool:
    """Whether the running command's --max-timeout-ms was given (else Kafka's default is assumed, and
    the report says so)."""
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source("max_timeout_ms") if ctx is not None else None
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _options(as_of, max_timeout_ms):
    from auditor.engine.context import AuditOptions

    return AuditOptions(as_of_ms=as_of, transaction_max_timeout_ms=max_timeout_ms,
                        transaction_max_timeout_given=max_timeout_given())


def _spark(master, confs, small_input: bool = False):
    from auditor.spark.session import get_spark, parse_conf

    try:
        conf = parse_conf(confs)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    return get_spark(master, conf, delta=False, small_input=small_input)  # Parquet tables only


def _c1_tables(tables: str) -> bool:
    """Is the ingested dump small enough for a driver JVM that compiles with C1 only
    (:func:`auditor.perf.tuning.c1_audit`: more than the small path's dumps)?"""
    import json

    from auditor.perf.tuning import c1_audit

    try:
        rows = json.loads((Path(tables) / "_ingest.json").read_text()).get("tables", {})
        return c1_audit(rows)
    except (OSError, ValueError, AttributeError):
        return False


def _start_decode(plan, master, tables_dir: str):
    """The local decode of ``plan`` into ``tables_dir`` (``spark_job.start_local_decode``), started
    before Spark, when the session will have a local master; else None (Spark decodes)."""
    from auditor.ingest.spark_job import start_local_decode
    from auditor.spark.session import embedded_local

    return start_local_decode(plan, tables_dir) if embedded_local(master) else None


def _run_audit(spark, tables, rules, as_of, max_timeout_ms, findings_out, progress):
    from auditor.engine.runner import audit
    from auditor.report.spark.data import ReportData

    try:
        return audit(spark, tables, options=_options(as_of, max_timeout_ms), only=list(rules), out=findings_out,
                     progress=progress, report=ReportData())
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _check_outputs(*dirs: str | None) -> None:
    """An output directory that cannot be written fails now, not after the decode and the rules."""
    from auditor.ingest.spark_job import check_output

    for d in dirs:
        if d:
            check_output(d)


def _report(res, rules, fmt, fail_on, bootstrap_server, filter_opts, source=None, exit_zero=False,
            tables: str | None = None, quiet: bool = False) -> None:
    """Render the audit's findings like `txn-audit report` does, then exit with its status.
    ``tables``: where the tables the findings come from are kept (``report.run["tables"]``:
    the renderers show ``txn-audit timeline TABLES ...`` for each finding)."""
    if res.report_error:
        err.print(f"[yellow]warning[/yellow]: no run summary or charts: {safe(res.report_error)}")
    report = from_audit(res, make_filters(rules=rules, **filter_opts), bootstrap_server, source=source)
    if tables:
        report.run["tables"] = str(Path(tables).absolute())
    if tables and not quiet and err.is_terminal:
        t = safe(report.run["tables"])
        err.print(f"tables kept in {t}: txn-audit timeline {t} --topic ... (see each finding)")
    finish(report, fmt, fail_on, exit_zero, baseline=filter_opts.get("baseline"),
           report_file=filter_opts.get("report_file"))


def _keep_findings(res: AuditResult, tdir: Path, digest: str, as_of: int | None, max_timeout_ms: int,
                   rules: tuple[str, ...]) -> None:
    """The audit's findings kept beside the tables for the next scan (:func:`auditor.ingest.cache.keep_findings`).
    The engine's writer is imported only here, after the audit: a scan that reuses kept findings never loads it."""
    from auditor.engine.runner import write_findings

    cache.keep_findings(lambda out: write_findings(None, res, out), tdir, digest, as_of, max_timeout_ms, rules)


def _report_cached(cached: Path, tdir: str, rules, fmt, fail_on, exit_zero, bootstrap_server, filter_opts,
                   quiet: bool) -> None:
    """Render the kept findings of an identical earlier scan (no Spark), then exit with its status."""
    report = load_report(cached, make_filters(rules=rules, **filter_opts), bootstrap_server)
    report.run["source"] = None
    report.run["tables"] = str(Path(tdir).absolute())
    if not quiet:
        err.print(f"[dim]inputs and options unchanged since audit run {safe(report.run.get('run_id'))}: "
                  f"reusing its findings ({report.total_findings}) and the tables in {safe(tdir)}[/dim]")
    finish(report, fmt, fail_on, exit_zero, baseline=filter_opts.get("baseline"),
           report_file=filter_opts.get("report_file"))


def _inventory(tdir: Path) -> list[dict]:
    """The files table of kept tables, as ingest returns it."""
    from auditor.tables.source import arrow_dataset

    ds = arrow_dataset(tdir, "files")
    return ds.to_table().to_pylist() if ds is not None else []


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
    return verbose_option(f)


def _looks_like_tables(path: Path) -> bool:
    return (path / "_ingest.json").is_file() or (path / "batches").is_dir()


@click.command("audit")
@click.argument("tables", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "findings_out", type=click.Path(file_okay=False), default=None,
              help="Write the findings directory here (Parquet + run summary; render later with `txn-audit report`).")
@common
def audit_cmd(tables, findings_out, master, confs, rules, as_of, max_timeout_ms, quiet, fmt, fail_on, exit_zero,
              bootstrap_server, **filter_opts) -> None:
    """Run the rules over ingested TABLES and report the findings.

    Filters (--topic, --severity, ...) choose what the report shows; --out
    always keeps every finding.

    \b
    Examples:
      txn-audit audit tables/                             # tables of `txn-audit ingest`
      txn-audit audit tables/ --out findings/ --format json > findings.json
      txn-audit audit tables/ --rule hanging-transaction --as-of now
      txn-audit audit tables/ --fail-on critical          # CI: fail on critical only

    \b
    Exit status: 0 no reported finding at or above --fail-on (always with
    --exit-zero), 1 some, 2 bad usage, TABLES is not an ingested directory or
    --out cannot be written.
    """
    if not _looks_like_tables(Path(tables)):
        raise InputError(f"{tables}: not an ingested tables directory (no _ingest.json or batches/); expected the "
                         "--out of `txn-audit ingest LOGDIR --out DIR` or the tables a scan kept")
    make_filters(rules=rules, **filter_opts)  # bad filter values fail before Spark starts
    _check_outputs(findings_out)
    spark = _spark(master, confs, small_input=_c1_tables(tables))
    with StageProgress(err, not quiet) as prog:
        res = _run_audit(spark, tables, rules, as_of, max_timeout_ms, findings_out, prog.stage("rules"))
    if not quiet:
        for rule, why in res.skipped.items():
            err.print(f"[yellow]skipped {safe(rule)}[/yellow]: {safe(why)}")
    _report(res, rules, fmt, fail_on, bootstrap_server, filter_opts, source=findings_out, exit_zero=exit_zero,
            tables=tables, quiet=True)


@click.command("scan")
@click.argument("logdirs", nargs=-1, required=True, type=click.Path(), callback=input_uris)
@remote_store_option
@click.option("--tables", "tables_dir", type=click.Path(file_okay=False), default=None,
              help="Keep the ingested tables here (default: $XDG_CACHE_HOME/txn-audit/tables/<digest of the inputs>, "
                   "i.e. ~/.cache/txn-audit/tables/...). Reused, without decoding again, when the inputs are unchanged.")
@click.option("--keep-tables/--no-keep-tables", default=True, show_default=True,
              help="Keep the ingested tables for `txn-audit timeline` / `coordinator` (--no-keep-tables: a temporary "
                   "directory, removed after the report).")
@click.option("--out", "findings_out", type=click.Path(file_okay=False), default=None,
              help="Write the findings directory here (Parquet + run summary; render later with `txn-audit report`).")
@common
@metrics_option
def scan_cmd(logdirs, remote_stores, tables_dir, keep_tables, findings_out, master, confs, rules, as_of, max_timeout_ms, quiet, fmt,
             fail_on, exit_zero, bootstrap_server, metrics, **filter_opts) -> None:
    """One shot: ingest LOGDIRS, run every rule, report the findings.

    LOGDIRS are local paths or file:, hdfs:// or s3a:// URIs (docs/operations.md).

    The tables are kept (see --tables) so that `txn-audit timeline TABLES` and
    `txn-audit coordinator TABLES` can follow up on a finding without a second
    ingest; the report names the place (run.tables in JSON). A second scan of
    unchanged inputs reuses them, and with the same --as-of (not 'now'),
    --max-timeout-ms and rules (or a subset: then --rule filters) it reuses the
    findings too: another filter, format or --baseline renders without Spark.
    With another --as-of or --max-timeout-ms it decides the verdicts and ages
    again from what the first audit collected, also without Spark.

    \b
    Examples:
      txn-audit scan /var/lib/kafka/data
      txn-audit scan broker-1/ broker-2/ --tables t/ --out findings/
      txn-audit scan /var/lib/kafka/data --format html --exit-zero > report.html
      txn-audit scan hdfs://nn:8020/kafka/data --severity error --no-keep-tables
      txn-audit scan /var/lib/kafka/data --metrics /var/lib/prometheus/node-exporter/txn_audit.prom
      txn-audit timeline t/ --topic payments --partition 3   # after a finding

    \b
    Exit status: 0 no reported finding at or above --fail-on (always with
    --exit-zero), 1 some, 2 bad usage, an input missing or holding nothing
    readable (checked before Spark starts), or --tables/--out cannot be written.
    """
    from auditor.ingest.plan import make_plan

    if tables_dir and not keep_tables:
        raise click.UsageError("--tables DIR keeps the tables in DIR: drop --no-keep-tables, or --tables")
    make_filters(rules=rules, **filter_opts)  # bad filter values fail before Spark starts
    _check_outputs(tables_dir, findings_out)
    logdirs = tuple(logdirs) + tuple(remote_stores)
    plan = make_plan(list(logdirs))  # before Spark: its size chooses the session's settings
    check_inputs(list(logdirs), plan)  # a missing or empty input fails now, not after Spark started
    digest = cache.inputs_digest(list(logdirs), plan) if keep_tables else ""
    if keep_tables and not tables_dir:
        tables_dir = str(cache.default_tables(digest))
        _check_outputs(tables_dir)
    kept = cache.kept(Path(tables_dir), digest) if keep_tables else None
    cached = (cache.cached_findings(Path(tables_dir), kept, as_of, max_timeout_ms, rules)
              if kept is not None and not findings_out and not metrics.path else None)
    if cached is not None:
        return _report_cached(cached, tables_dir, rules, fmt, fail_on, exit_zero, bootstrap_server, filter_opts, quiet)
    res = _decide_again(Path(tables_dir), kept, rules, as_of, max_timeout_ms, quiet) if kept is not None else None
    readable = 0
    if res is None:
        res, readable = _scan(plan, list(logdirs), tables_dir, keep_tables, kept, digest, master, confs, rules, as_of,
                              max_timeout_ms, findings_out, quiet)
    else:
        _keep_findings(res, Path(tables_dir), digest, as_of, max_timeout_ms, rules)
        if findings_out:
            from auditor.engine.runner import write_findings

            write_findings(None, res, findings_out)
            cache.note_tables(Path(findings_out), Path(tables_dir))
    if metrics.path:
        _record(metrics, res, rules, max_timeout_ms, files_decoded=readable if kept is None else 0)
    _report(res, rules, fmt, fail_on, bootstrap_server, filter_opts, source=findings_out, exit_zero=exit_zero,
            tables=tables_dir if keep_tables else None, quiet=quiet)


def _scan(plan, logdirs: list[str], tables_dir, keep_tables: bool, kept, digest: str, master, confs, rules, as_of,
          max_timeout_ms: int, findings_out, quiet: bool):
    """Ingest (unless the tables are ``kept``) and audit with Spark; the tables, the findings and
    what the audit collected kept for the next scan. Returns (the audit, the readable files)."""
    from auditor.ingest.spark_job import ingest, small_plan

    with tempfile.TemporaryDirectory(prefix="txn-audit-") as tmp:
        tdir = tables_dir or str(Path(tmp) / "tables")
        # a local input is decoded by processes of its own while the driver JVM starts
        decoded = _start_decode(plan, master, tdir) if kept is None else None
        try:
            spark = _spark(master, confs, small_input=small_plan(plan))
        except BaseException:
            if decoded is not None:
                decoded.discard()
            raise
        with StageProgress(err, not quiet) as prog:
            if kept is not None:
                files = _inventory(Path(tdir))
                if not quiet:
                    err.print(f"[dim]inputs unchanged since scan {safe(kept.get('run_id'))}: reusing the tables in "
                              f"{safe(tdir)}[/dim]")
            else:
                res_in = ingest(spark, logdirs, tdir, progress=prog.ingest(plan), plan=plan, decoded=decoded)
                files = res_in.files
                if keep_tables:
                    cache.keep_scan(tdir, digest, logdirs, res_in.run_id)
            readable = _readable(files, quiet)
            res = _run_audit(spark, tdir, rules, as_of, max_timeout_ms, findings_out, prog.stage("rules"))
            if keep_tables:
                _keep_findings(res, Path(tdir), digest, as_of, max_timeout_ms, rules)
                if res.collected is not None and res.collected.complete:
                    cache.keep_collected(res.collected.save, Path(tdir), digest, rules)
                if findings_out:
                    cache.note_tables(Path(findings_out), Path(tdir))
    return res, readable


def _decide_again(tdir: Path, kept: dict, rules, as_of, max_timeout_ms: int, quiet: bool):
    """An audit of the kept tables decided again from what an earlier audit of them collected
    (another ``--as-of`` or ``--max-timeout-ms``: :func:`auditor.engine.runner.finish_again`), without
    Spark; None when nothing reusable was kept (then the audit runs)."""
    path = cache.collected_file(tdir, kept, rules)
    if path is None:
        return None
    from auditor.engine.runner import Collected, finish_again
    from auditor.report.spark.data import ReportData

    collected = Collected.load(path)
    if collected is None or not collected.complete:
        return None
    if not quiet:
        err.print(f"[dim]inputs unchanged since scan {safe(kept.get('run_id'))}: deciding the verdicts again from "
                  f"that audit's collected rows in {safe(str(tdir))} (no Spark)[/dim]")
    try:
        return finish_again(collected, _options(as_of, max_timeout_ms), list(rules), report=ReportData())
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _readable(files: list[dict], quiet: bool) -> int:
    """The input files a scan read, after naming the bad ones on stderr; none is bad input (status 2)."""
    if not quiet:
        from auditor.ingest.inventory import CLEAN_STATUSES

        for f in (f for f in files if f["status"] not in CLEAN_STATUSES):
            pos = f"byte {f['error_position']}" if f["error_position"] is not None else "whole file"
            err.print(f"[yellow]{safe(f['status'])}[/yellow] {safe(f['path'])} at {pos}: {safe(f['error_message'] or f['note'] or '')}")
    readable = [f for f in files if f["status"] not in ("unreadable", "skipped", "foreign")]
    if not readable:
        from auditor.cli.ingest_cmd import EXPECTED_INPUT

        raise InputError("no input file was readable: " + "; ".join(
            f"{f['path']} ({f['status']}{': ' + f['note'] if f.get('note') else ''})" for f in files[:5])
            + f"; {EXPECTED_INPUT}")
    return len(readable)


def _record(metrics: MetricsRun, res: AuditResult, rules: tuple[str, ...], max_timeout_ms: int,
            files_decoded: int) -> None:
    """``--metrics``: every finding of the audit (the report's filters choose what it shows, not
    what is open), the clusters the report knows, the kinds of the rules that ran."""
    from auditor.engine.runner import select_rules
    from auditor.report.metrics import Outcome

    report = from_audit(res)
    metrics.succeeded(Outcome(report.findings, report.cluster_ids(), select_rules(discover(), list(rules)),
                              files_decoded, max_timeout_ms))
