"""``txn-audit audit``, ``scan``, ``rules`` and ``explain``."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import click
from rich.markdown import Markdown
from rich.table import Table

from auditor.cli.console import err, out, safe, wide
from auditor.engine.rule import SEVERITIES, discover, severity_rank


def _options(as_of, max_timeout_ms):
    from auditor.engine.views import AuditOptions

    return AuditOptions(as_of_ms=as_of, transaction_max_timeout_ms=max_timeout_ms)


def _spark(master, confs):
    from auditor.engine.session import get_spark, parse_conf

    try:
        conf = parse_conf(confs)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    return get_spark(master, conf)


def _run_audit(spark, tables, rules, as_of, max_timeout_ms, findings_out, quiet):
    from auditor.engine.audit import audit

    def progress(rule: str, i: int, n: int) -> None:
        if not quiet:
            err.print(f"[dim]rule {i + 1}/{n}: {rule}[/dim]")

    try:
        return audit(spark, tables, options=_options(as_of, max_timeout_ms), only=list(rules), out=findings_out,
                     progress=progress)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def print_findings(findings: list[dict], fmt: str) -> None:
    """The terminal report (the full report formats live in ``txn-audit report``)."""
    order = sorted(findings, key=lambda f: (-severity_rank(f["severity"]), f["rule"], f.get("topic") or "",
                                            f.get("partition") or 0, f.get("first_offset") or 0))
    if fmt == "jsonl":
        for f in order:
            sys.stdout.write(json.dumps(f, default=str) + "\n")
        return
    if fmt == "json":
        sys.stdout.write(json.dumps({"findings": order}, default=str, indent=2) + "\n")
        return
    if not order:
        out.print("[green]no findings[/green]")
        return
    t = Table(title=f"{len(order)} findings", show_lines=True)
    for c in ("Severity", "Rule", "Topic", "Partition", "ProducerId", "ProducerEpoch", "StartOffset", "Message"):
        t.add_column(c, overflow="fold")
    for f in order:
        t.add_row(safe(f["severity"]), safe(f["rule"]), safe(f.get("topic") or ""), safe(f.get("partition") if f.get("partition") is not None else ""),
                  safe(f.get("producer_id") if f.get("producer_id") is not None else ""),
                  safe(f.get("producer_epoch") if f.get("producer_epoch") is not None else ""),
                  safe(f.get("first_offset") if f.get("first_offset") is not None else ""), safe(f["message"]))
    wide().print(t)


def _exit(findings: list[dict], fail_on: str) -> None:
    bad = [f for f in findings if severity_rank(f["severity"]) >= severity_rank(fail_on)]
    sys.exit(1 if bad else 0)


_common = [
    click.option("--master", default=None, help="Spark master URL (default: embedded local[*])."),
    click.option("--conf", "confs", multiple=True, help="Spark setting key=value (repeatable)."),
    click.option("--rule", "rules", multiple=True, help="Only these rule ids (repeatable)."),
    click.option("--as-of", type=int, default=None, help="Reference time in epoch ms for ages (default: newest timestamp in the dump)."),
    click.option("--max-timeout-ms", type=int, default=900_000, show_default=True, help="The cluster's transaction.max.timeout.ms."),
    click.option("--format", "fmt", type=click.Choice(["table", "json", "jsonl"]), default="table", show_default=True),
    click.option("--fail-on", type=click.Choice(SEVERITIES), default="error", show_default=True,
                 help="Exit 1 when a finding has at least this severity."),
    click.option("--quiet", "-q", is_flag=True, help="No progress on stderr."),
]


def common(f):
    for opt in reversed(_common):
        f = opt(f)
    return f


@click.command("audit")
@click.argument("tables", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "findings_out", type=click.Path(file_okay=False), default=None, help="Write the findings table (Parquet) here.")
@common
def audit_cmd(tables, findings_out, master, confs, rules, as_of, max_timeout_ms, fmt, fail_on, quiet) -> None:
    """Run the rules over ingested TABLES and print the findings."""
    spark = _spark(master, confs)
    res = _run_audit(spark, tables, rules, as_of, max_timeout_ms, findings_out, quiet)
    for rule, why in res.skipped.items():
        err.print(f"[yellow]skipped {safe(rule)}[/yellow]: {safe(why)}")
    print_findings(res.findings, fmt)
    _exit(res.findings, fail_on)


@click.command("scan")
@click.argument("logdirs", nargs=-1, required=True, type=click.Path())
@click.option("--tables", "tables_dir", type=click.Path(file_okay=False), default=None,
              help="Keep the ingested tables here (default: a temporary directory).")
@click.option("--out", "findings_out", type=click.Path(file_okay=False), default=None, help="Write the findings table (Parquet) here.")
@common
def scan_cmd(logdirs, tables_dir, findings_out, master, confs, rules, as_of, max_timeout_ms, fmt, fail_on, quiet) -> None:
    """One shot: ingest LOGDIRS, run every rule, print the report."""
    from auditor.engine.ingest_job import ingest

    spark = _spark(master, confs)
    with tempfile.TemporaryDirectory(prefix="txn-audit-") as tmp:
        tdir = tables_dir or str(Path(tmp) / "tables")
        res_in = ingest(spark, list(logdirs), tdir, progress=None if quiet else (
            lambda name, i, n: err.print(f"[dim]decoding {i + 1}/{n}: {name}[/dim]")))
        for f in res_in.bad_files:
            if not quiet:
                pos = f"byte {f['error_position']}" if f["error_position"] is not None else "whole file"
                err.print(f"[yellow]{safe(f['status'])}[/yellow] {safe(f['path'])} at {pos}: {safe(f['error_message'] or f['note'] or '')}")
        res = _run_audit(spark, tdir, rules, as_of, max_timeout_ms, findings_out, quiet)
    print_findings(res.findings, fmt)
    _exit(res.findings, fail_on)


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
    r = rules[rule]
    out.print(Markdown(f"# {r.id}\n\n*{r.title}* — default severity **{r.severity}**; "
                       f"proposals: {', '.join(r.proposals) or '-'}\n\n{r.doc}\n\n**Remediation:** {r.remediation}"))
