"""``txn-audit report FINDINGS``, and the report options ``scan`` / ``audit`` share.

``report`` renders a findings directory (``audit --out`` / ``scan --out``)
with pyarrow only — no Spark session, no JVM — so the split pipeline (a batch
job writes findings, people render them where they are) costs nothing to read.
The three commands share formats, filters and exit status through
:func:`report_options` and :func:`emit_report`.

Exit status: 0 when no reported finding reaches ``--fail-on`` (or ``--exit-zero``),
1 when one does, 2 on bad usage or unreadable input. Results go to stdout,
diagnostics to stderr.
"""

from __future__ import annotations

import re
import sys

import click

from auditor.report.console import err, out, safe, wide
from auditor.engine.rule import SEVERITIES
from auditor.report import FORMATS, Filters, FindingsDirError, Report, load_report, render
from auditor.report.model import fails, parse_duration, parse_time


class InputError(click.ClickException):
    """Unreadable input (exit status 2, like usage errors)."""

    exit_code = 2


class _Duration(click.ParamType):
    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class _Time(click.ParamType):
    name = "time"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_time(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _baseline(ctx, param, value):
    """``--baseline``: read now, so a wrong path fails before any decoding or Spark."""
    if value is None:
        return None
    from auditor.report.baseline import BaselineError, load_baseline

    try:
        return load_baseline(value)
    except BaselineError as exc:
        raise click.BadParameter(str(exc)) from None


def _regex(ctx, param, value):
    if value is None:
        return None
    try:
        re.compile(value)
    except re.error as exc:
        raise click.BadParameter(f"not a regular expression: {exc}") from None
    return value


_REPORT_OPTIONS = [
    click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
                 help="Report format [default: table on a terminal, json otherwise]."),
    click.option("--topic", "topics", multiple=True, metavar="GLOB", help="Only findings on topics matching GLOB (repeatable)."),
    click.option("--partition", "partitions", multiple=True, type=click.IntRange(min=0),
                 help="Only findings on this partition (repeatable; 0 or more)."),
    click.option("--producer-id", "producer_ids", multiple=True, type=int, help="Only findings of this producer id (repeatable)."),
    click.option("--transactional-id", "transactional_id", default=None, metavar="REGEX", callback=_regex,
                 help="Only findings whose transactional id matches REGEX (searched anywhere in the id)."),
    click.option("--since", "since_ms", type=_Time(), default=None, metavar="TIME",
                 help="Only findings whose time span reaches TIME or later (ISO-8601, UTC unless an offset is given, or epoch ms)."),
    click.option("--until", "until_ms", type=_Time(), default=None, metavar="TIME",
                 help="Only findings whose time span starts at TIME or earlier."),
    click.option("--min-duration", "min_duration_ms", type=_Duration(), default=None, metavar="DURATION",
                 help="Only findings lasting at least DURATION (30s, 15m, 2h, 1d, or ms)."),
    click.option("--severity", "min_severity", type=click.Choice(SEVERITIES), default=None,
                 help="Only findings of at least this severity."),
    click.option("--fail-on", type=click.Choice(SEVERITIES), default="error", show_default=True,
                 help="Exit 1 when a reported finding has at least this severity."),
    click.option("--exit-zero", is_flag=True,
                 help="Exit 0 even when findings reach --fail-on (usage and input errors still exit 2): "
                      "for `> report.html` under `set -e`."),
    click.option("--bootstrap-server", default=None, metavar="HOST:PORT",
                 help="Put this broker into the remediation commands instead of <broker:port>."),
    click.option("--baseline", type=click.Path(exists=True), default=None, callback=_baseline, metavar="PREV",
                 help="An earlier report (--format json/jsonl) or findings directory (--out): say which findings "
                      "are new, still open or resolved since. Exit 3 when only findings it had remain."),
    click.option("--report-file", type=click.Path(dir_okay=False, writable=True), default=None, metavar="FILE",
                 help="Write the report to FILE instead of stdout (html and markdown on a terminal go to "
                      "./txn-audit-report-TIME.html/.md by default; the path is printed)."),
]


def report_options(f):
    """The format, filter and exit-status options of scan / audit / report."""
    for opt in reversed(_REPORT_OPTIONS):
        f = opt(f)
    return f


def make_filters(*, rules=(), topics=(), partitions=(), producer_ids=(), transactional_id=None, since_ms=None,
                 until_ms=None, min_duration_ms=None, min_severity=None, **_ignored) -> Filters:
    if since_ms is not None and until_ms is not None and since_ms > until_ms:
        raise click.BadParameter("--since is after --until", param_hint="--since/--until")
    return Filters(topics=tuple(topics), partitions=tuple(partitions), producer_ids=tuple(producer_ids),
                   transactional_id=transactional_id, since_ms=since_ms, until_ms=until_ms,
                   min_duration_ms=min_duration_ms, rules=tuple(rules), min_severity=min_severity)


def resolve_format(fmt: str | None) -> str:
    return fmt or ("table" if out.is_terminal else "json")


def emit_report(report: Report, fmt: str | None, report_file: str | None = None) -> None:
    """Write the report in ``fmt`` to stdout, or to ``report_file`` -- also, when none is given,
    an HTML or Markdown report meant for a terminal (it would flood it: write a file, say where)."""
    fmt = resolve_format(fmt)
    if report_file is None and fmt in ("html", "markdown") and out.is_terminal:
        import time

        report_file = f"txn-audit-report-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.{'html' if fmt == 'html' else 'md'}"
    if report_file is not None:
        _write_report_file(report, fmt, report_file)
        return
    if fmt == "table":
        from auditor.report.render_table import print_table_report

        print_table_report(report, wide())
        return
    text = render(report, fmt)
    sys.stdout.write(text)
    sys.stdout.flush()


def _write_report_file(report: Report, fmt: str, path: str) -> None:
    """The report in ``path``, whole or not at all (temp file + rename); its path on stderr."""
    import os
    from pathlib import Path

    if fmt == "table":
        from auditor.report.render_table import render_table

        text = render_table(report, width=100)
    else:
        text = render(report, fmt)
    target = Path(path).absolute()
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write the report to {target}: {exc}") from None
    err.print(f"report written to {safe(str(target))}")


def with_baseline(report: Report, baseline) -> Report:
    """``report`` compared with ``--baseline`` (a loaded :class:`~auditor.report.baseline.Baseline`)."""
    if baseline is not None:
        from auditor.report.baseline import compare

        compare(report, baseline)
    return report


def finish(report: Report, fmt: str | None, fail_on: str, exit_zero: bool, *, baseline=None,
           report_file: str | None = None) -> None:
    """What scan, audit and report end with: the report compared with ``--baseline``, written
    (:func:`emit_report`), then the exit status (:func:`exit_with`)."""
    emit_report(with_baseline(report, baseline), fmt, report_file)
    exit_with(report, fail_on, exit_zero)


def exit_with(report: Report, fail_on: str, exit_zero: bool = False) -> None:
    """0, or 1 when a reported finding reaches ``fail_on``; with a baseline 3 when only findings
    it had remain (:func:`auditor.report.baseline.exit_status`)."""
    if exit_zero:
        sys.exit(0)
    if report.baseline is not None:
        from auditor.report.baseline import exit_status

        sys.exit(exit_status(report, fail_on))
    sys.exit(1 if fails(report.findings, fail_on) else 0)


@click.command("report")
@click.argument("findings", type=click.Path())
@click.option("--rule", "rules", multiple=True, help="Only findings of these rule ids (repeatable).")
@report_options
def report_cmd(findings, rules, fmt, fail_on, exit_zero, bootstrap_server, baseline, report_file,
               **filter_opts) -> None:
    """Render a findings directory (written by `audit --out` / `scan --out`) without Spark.

    FINDINGS holds part-00000.parquet and _audit.json (plus _plots.json for the
    HTML charts).

    \b
    Examples:
      txn-audit report findings/                          # a table on a terminal
      txn-audit report findings/ --format html --exit-zero > report.html
      txn-audit report findings/ --severity error --topic 'payments*'
      txn-audit report findings/ --format jsonl | jq .rule

    \b
    Exit status: 0 no reported finding at or above --fail-on (always with
    --exit-zero), 1 some, 2 bad usage or not a readable findings directory;
    with --baseline 3 when the only such findings are ones the baseline had.
    """
    filters = make_filters(rules=rules, **filter_opts)
    try:
        report = load_report(findings, filters, bootstrap_server)
    except FindingsDirError as exc:
        raise InputError(str(exc)) from None
    unknown = sorted(set(rules) - {f["rule"] for f in report.findings} - _known_rules())
    if unknown:
        err.print(f"[yellow]note[/yellow]: unknown rule id(s) {safe(', '.join(unknown))}; see `txn-audit rules`")
    finish(report, fmt, fail_on, exit_zero, baseline=baseline, report_file=report_file)


def _known_rules() -> set[str]:
    try:
        from auditor.engine.rule import discover

        return {r.id for r in discover()}
    except Exception:  # noqa: BLE001 - a note only; the report itself does not need the catalog
        return set()
