"""``--format table``: the terminal report (rich).

A summary panel, then one table per rule with the column names of
``kafka-transactions.sh find-hanging`` where they apply, so operators can put
the two side by side. Every value from the dump (topics, transactional ids,
paths, messages) goes into ``rich.text.Text`` objects, never into markup
strings: a transactional id like ``[red]x[/red]`` prints as itself.

Remediation commands are printed under each table, not inside it: a table cell
folds long lines and draws borders through them, and a command must survive
copy and paste. The block is valid shell: a ``# [n]`` comment names the row,
the first line is the ``--start-offset`` form, and the older-broker form
follows as a comment, so pasting the block runs exactly one abort per row.
"""

from __future__ import annotations

from typing import Callable

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from auditor.report.model import Report, coordinator_epoch, format_duration, format_time, one_line

MIN_MESSAGE_WIDTH = 40  # narrower message columns are unreadable: the messages go under the table
_NUMERIC = {"#", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset"}
SEVERITY_STYLE = {"critical": "bold white on red", "error": "bold red", "warning": "yellow", "info": "cyan"}


def _s(v) -> str:
    """A value for a cell: None as empty, control characters escaped (``one_line``)."""
    return one_line(v)


# (header, value) — find-hanging's names first, in its order
COLUMNS: list[tuple[str, Callable[[dict], str]]] = [
    ("Topic", lambda f: _s(f.get("topic"))),
    ("Partition", lambda f: _s(f.get("partition"))),
    ("ProducerId", lambda f: _s(f.get("producer_id"))),
    ("ProducerEpoch", lambda f: _s(f.get("producer_epoch"))),
    ("CoordinatorEpoch", lambda f: _s(coordinator_epoch(f))),
    ("StartOffset", lambda f: _s(f.get("first_offset"))),
    ("LastTimestamp", lambda f: format_time(f.get("last_timestamp"))),
    ("Duration", lambda f: format_duration(f.get("duration_ms"))),
    ("TransactionalId", lambda f: _s(f.get("transactional_id"))),
]


def _where_columns(report: Report) -> list[tuple[str, Callable[[dict], str]]]:
    """Cluster / Broker columns only when the report spans several of them."""
    clusters = {f.get("cluster_id") for f in report.findings}
    brokers: dict = {}
    for f in report.findings:
        for r in f.get("replicas") or [{"broker_id": f.get("broker_id"), "log_dir": f.get("log_dir")}]:
            brokers.setdefault(f.get("cluster_id"), set()).add((r.get("broker_id"), r.get("log_dir")))
    cols: list[tuple[str, Callable[[dict], str]]] = []
    if len(clusters) > 1:
        cols.append(("Cluster", lambda f: _s(f.get("cluster_id"))))
    if any(len(v) > 1 for v in brokers.values()):
        cols.append(("Broker", lambda f: ",".join(_s(r.get("broker_id")) for r in f.get("replicas") or [])
                      or _s(f.get("broker_id"))))
    return cols


def summary_rows(report: Report) -> list[tuple[str, str]]:
    """(label, value) lines of the summary, shared with the Markdown and HTML reports."""
    s = report.summary
    rows: list[tuple[str, str]] = []
    if report.run.get("source"):
        rows.append(("Findings dir", report.run["source"]))
    if s.get("inputs"):
        shown = s["inputs"][:5]
        more = f" (+{len(s['inputs']) - 5} more)" if len(s["inputs"]) > 5 else ""
        rows.append(("Inputs", ", ".join(shown) + more))
    if s.get("clusters"):
        rows.append(("Clusters", f"{len(s['clusters'])}: " + ", ".join(_s((c or {}).get("cluster_id")) or "?"
                                                                       for c in s["clusters"][:5])
                     + (" …" if len(s["clusters"]) > 5 else "")))
    if s.get("brokers"):
        bs = s["brokers"]
        desc = ", ".join(f"{_s(b.get('broker_id')) or '?'} ({_s(b.get('log_dir')) or '?'})" for b in bs[:5]) + (" …" if len(bs) > 5 else "")
        rows.append(("Brokers (log dirs)", f"{len(bs)}: {desc}"))
    if s:
        rows.append(("Partitions", f"{s.get('partitions', 0):,}"))
        rows.append(("Batches", f"{s.get('batches', 0):,}"))
        tx = s.get("transactions") or {}
        if tx:
            names = {"commit": "committed", "abort": "aborted", "open": "open", "marker-only": "marker-only"}
            rows.append(("Transactions", ", ".join(f"{n:,} {names.get(k, k)}" for k, n in tx.items())))
        rows.append(("Transaction versions", transaction_versions_text(s.get("transaction_versions") or {})))
        tr = s.get("time_range") or {}
        if tr.get("first_ms") is not None:
            rows.append(("Time range", f"{format_time(tr['first_ms'])} … {format_time(tr['last_ms'])}"))
    if report.run.get("as_of_ms"):
        rows.append(("Ages as of", format_time(report.run["as_of_ms"])))
    sev = report.by_severity()
    text = ", ".join(f"{n} {k}" for k, n in sev.items())
    if report.filters.active:
        text += f" (of {report.total_findings} before filters)"
    rows.append(("Findings", f"{len(report.findings)}: {text}"))
    if report.filters.active:
        rows.append(("Filters", "; ".join(f"{k}={v}" for k, v in report.filters.describe().items())))
    if report.run.get("skipped"):
        rows.append(("Skipped rules", "; ".join(f"{k}: {v}" for k, v in report.run["skipped"].items())))
    lacks = s.get("input_lacks") or []
    if lacks:
        more = f"; … {len(lacks) - 5} more (summary.input_lacks)" if len(lacks) > 5 else ""
        rows.append(("Input lacks", "; ".join(lacks[:5]) + more))
    if not s:
        rows.append(("Note", "this findings directory has no run summary (written without report data)"))
    return rows


def transaction_versions_text(tv: dict) -> str:
    """``seen 0/1, 2 (commit markers: 31 same epoch, 15 epoch+1; transaction.version feature: 2; ...)``."""
    seen = ", ".join(tv.get("seen") or []) or "none"
    parts = []
    cm = tv.get("commit_markers") or {}
    if cm:
        parts.append(f"commit markers: {cm.get('same_epoch', 0)} same epoch (TV0/1), {cm.get('epoch_bump', 0)} epoch+1 (TV2)")
    fl = tv.get("feature_levels") or {}
    if fl:
        levels = sorted({v for v in fl.values() if v is not None}, key=str)
        parts.append("transaction.version feature: " + ", ".join(str(v) for v in levels))
    cv = tv.get("client_versions") or {}
    if cv:
        parts.append("coordinator client versions: " + ", ".join(f"v{k} ×{n}" for k, n in cv.items()))
    return seen + (f" ({'; '.join(parts)})" if parts else "")


def severity_text(sev: str) -> Text:
    return Text(one_line(sev), style=SEVERITY_STYLE.get(sev, ""))


def _summary_panel(report: Report) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in summary_rows(report):
        if label == "Findings":
            t = Text(value.split(":", 1)[0] + ": ")
            for i, (k, n) in enumerate(report.by_severity().items()):
                t.append(("" if i == 0 else ", ") + f"{n} {k}", style=SEVERITY_STYLE.get(k, "") if n else "dim")
            if report.filters.active:
                t.append(f" (of {report.total_findings} before filters)")
            grid.add_row(label, t)
        else:
            grid.add_row(label, Text(one_line(value)))
    return Panel(grid, title="txn-audit report", title_align="left", border_style="blue")


def _natural(header: str, values: list[str]) -> int:
    return max([len(header)] + [len(v) for v in values])


def rule_table(rule: str, findings: list[dict], where: list[tuple[str, Callable[[dict], str]]],
               width: int | None = None) -> tuple[Table, bool]:
    """The rule's table, and whether the messages are in it. They are when the
    other columns fit at their natural width with room for a readable message
    column (>= MIN_MESSAGE_WIDTH); otherwise the caller prints them under the table."""
    values = {h: [fn(f) for f in findings] for h, fn in where + COLUMNS}
    values["#"] = [str(i + 1) for i in range(len(findings))]
    values["Severity"] = [f["severity"] for f in findings]
    heads = ["#", "Severity"] + [h for h, _ in where + COLUMNS if any(values[h])]  # drop columns no finding has
    need = sum(_natural(h, values[h]) for h in heads) + 3 * (len(heads) + 1) + 1
    with_message = width is None or width - need >= MIN_MESSAGE_WIDTH
    fits = width is None or need <= width
    t = Table(title=Text(f"{one_line(rule)} — {len(findings)} finding{'s' if len(findings) != 1 else ''}", style="bold"),
              title_justify="left", show_lines=with_message, header_style="bold")
    for h in heads:
        t.add_column(h, overflow="fold", no_wrap=h in ("#", "Severity"), justify="right" if h in _NUMERIC else "left",
                     min_width=_natural(h, values[h]) if fits else None)
    if with_message:
        t.add_column("Message", overflow="fold", ratio=1)
    for i, f in enumerate(findings):
        cells = [severity_text(f["severity"]) if h == "Severity" else Text(values[h][i]) for h in heads]
        if with_message:
            cells.append(Text(one_line(f.get("message"))))
        t.add_row(*cells)
    return t, with_message


def remediation_lines(report: Report, findings: list[dict]) -> list[str]:
    """The paste-able block under a rule's table (see the module docstring)."""
    lines: list[str] = []
    prose: list[str] = []
    for i, f in enumerate(findings):
        if f.get("remediation") and f["remediation"] not in prose:
            prose.append(f["remediation"])
        cmds = report.commands(f)
        if not cmds:
            continue
        where = f"{one_line(f.get('topic'))}-{f.get('partition')} " if f.get("topic") is not None else ""
        lines.append(f"# [{i + 1}] {where}from offset {f.get('first_offset')} (producer {f.get('producer_id')})")
        for c in cmds:
            lines.append(one_line(c["command"] if not c["applies_to"] else f"# {c['applies_to']}: {c['command']}"))
    return [f"# {one_line(p)}" for p in prose] + lines


def print_table_report(report: Report, console: Console) -> None:
    """Print the report on ``console`` (results go to stdout; see auditor.cli.console)."""
    console.print(_summary_panel(report))
    if not report.findings:
        console.print(Text("no findings" + (" match the filters" if report.filters.active else ""), style="green"))
        return
    where = _where_columns(report)
    for rule, fs in report.by_rule().items():
        console.print()
        table, inline = rule_table(rule, fs, where, console.width)
        console.print(table)
        if not inline:  # not enough room beside the other columns: the messages under the table, full width
            for i, f in enumerate(fs):
                line = Text(f"[{i + 1}] ", style="bold")
                line.append(one_line(f.get("message")))
                console.print(line)
        lines = remediation_lines(report, fs)
        if lines:
            console.print(Text("Remediation:", style="bold"))
            for line in lines:
                # soft_wrap: never folded, so a copied command stays one line
                console.print(Text(line, style="dim" if line.startswith("#") else ""), soft_wrap=True)


def render_table(report: Report, width: int = 200) -> str:
    """The table report as plain text (tests, and writing it to a file)."""
    import io

    buf = io.StringIO()
    print_table_report(report, Console(file=buf, width=width, color_system=None, highlight=False))
    return buf.getvalue()


__all__ = ["COLUMNS", "print_table_report", "render_table", "summary_rows", "remediation_lines"]
