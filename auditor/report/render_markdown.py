"""``--format markdown``: a report to paste into a ticket (GitHub / GitLab flavoured).

Values from the dump are untrusted: a transactional id can hold ``|`` (which
would split a table cell), backticks, ``<script>``, ``@mentions`` or link
syntax. :func:`md_text` escapes every inline-significant character, and
commands go in fenced blocks whose fence is longer than any backtick run
inside, so nothing a producer chose can change the ticket's structure.
"""

from __future__ import annotations

import re

from auditor.model.advice import LEGACY_FORM
from auditor.report.model import Report, format_time, one_line
from auditor.report.render_table import (COLUMNS, also_text, incident_commands, location, resolved_texts,
                                           summary_rows)

# punctuation that means something inline or in a GFM table cell: emphasis, code, links (``]``
# starts none once ``[`` and ``]`` are escaped), strikethrough, math, mentions and issue refs.
# Line-start syntax (``-``, ``+``, ``=``) cannot occur: every value sits inside a line.
_MD_ESCAPE = re.compile(r"([\\`*_\[\]|~$@#])")


def md_text(value: object) -> str:
    """Untrusted text as inert Markdown: one line, HTML-significant characters as
    entities, inline syntax backslash-escaped (``|`` too, so table cells hold)."""
    s = one_line(value)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_ESCAPE.sub(r"\\\1", s)


def md_code_block(lines: list[str], info: str = "sh") -> str:
    """A fenced code block that its content cannot close."""
    body = "\n".join(lines)
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{body}\n{fence}"


def _table(headers: list[str], rows: list[list[str]], align: list[str] | None = None) -> list[str]:
    align = align or ["---"] * len(headers)
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _incidents(report: Report) -> list[str]:
    """One section per incident above info (:meth:`Report.incidents`), worst first: what its lead
    finding says, one line per further finding, its commands in one block, the lead's advice."""
    lines: list[str] = []
    shown = [inc for inc in report.incidents() if inc.severity != "info"]
    if shown:
        lines += ["## Incidents", ""]
    for n, inc in enumerate(shown, 1):
        f = inc.lead
        where = location(f)
        lines += [f"### {n}. {md_text(f['severity'])}: {md_text(f.get('rule'))}/{md_text(f.get('kind'))}"
                  + (f" at {md_text(where)}" if where else ""), "", md_text(f.get("message")), ""]
        lines += [f"- {md_text(also_text(other))}" for other in inc.findings[1:]]
        if len(inc.findings) > 1:
            lines.append("")
        cmds = [one_line(c) for c in incident_commands(report, inc)]
        cmds += [one_line(f"# {c['applies_to']}: {c['command']}") for c in report.commands(f)
                 if c["applies_to"] == LEGACY_FORM]
        if cmds:
            lines += [md_code_block(cmds), ""]
        if f.get("remediation"):
            lines += [f"Advice: {md_text(f['remediation'])}", ""]
    return lines


def _resolved(report: Report) -> list[str]:
    """The baseline's findings this run no longer has (``--baseline``)."""
    items = resolved_texts(report)
    return ["## Resolved since the baseline", "", *[f"- {md_text(t)}" for t in items], ""] if items else []


def render_markdown(report: Report) -> str:
    lines: list[str] = ["# txn-audit report", ""]
    lines += _table(["", ""], [[f"**{label}**", md_text(value)] for label, value in summary_rows(report)])
    lines.append("")
    if not report.findings:
        lines += ["No findings" + (" match the filters." if report.filters.active else "."), ""]
        return "\n".join(lines + _resolved(report))
    lines += _incidents(report) + _resolved(report)
    lines += ["## Findings by rule", ""]
    for rule, fs in report.by_rule().items():
        lines += [f"### {md_text(rule)} ({len(fs)})", ""]
        values = {h: [fn(f) for f in fs] for h, fn in COLUMNS}
        kept = [h for h, _ in COLUMNS if any(values[h])]
        headers = ["#", "Severity", *kept, "Message"]
        rows = []
        for i, f in enumerate(fs):
            sev = md_text(f["severity"])
            rows.append([str(i + 1), f"**{sev}**" if sev in ("critical", "error") else sev,
                         *[md_text(values[h][i]) for h in kept], md_text(f.get("message"))])
        align = ["---:", "---", *["---:" if h in ("Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset") else "---" for h in kept], "---"]
        lines += _table(headers, rows, align)
        lines.append("")
        evidence = [(i, f["evidence"]) for i, f in enumerate(fs) if f.get("evidence")]
        if evidence:
            lines += ["<details><summary>Evidence</summary>", ""]
            for i, ev in evidence:
                lines.append(f"- **[{i + 1}]** " + "; ".join(f"{md_text(k)}: {md_text(v)}" for k, v in ev.items()
                                                          if v not in (None, "")))
            lines += ["", "</details>", ""]
    if report.run.get("as_of_ms"):
        lines.append(f"<sub>txn-audit · run {md_text(report.run.get('run_id') or '-')} · ages as of "
                     f"{md_text(format_time(report.run['as_of_ms']))}</sub>")
        lines.append("")
    if report.timeout_text():
        lines += [f"<sub>{md_text(report.timeout_text())}</sub>", ""]
    return "\n".join(lines)
