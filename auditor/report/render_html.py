"""``--format html``: one self-contained page (summary, plots, findings).

Self-contained on purpose: the file gets attached to incidents and opened on
laptops without network access, so there is no external script, stylesheet,
font or image, and no script at all — the charts are inline SVG from svg.py.
A Content-Security-Policy meta tag (``default-src 'none'``) backs that up: even
if some value slipped past :func:`~auditor.report.svg.esc`, the browser would
refuse to run or fetch anything.
"""

from __future__ import annotations

import re

from auditor import __version__
from auditor.report.model import Report, format_time, one_line
from auditor.report.render_table import COLUMNS, summary_rows
from auditor.report.svg import esc, lso_lag_chart, session_chart

CSS = """
:root{--fg:#1d2430;--muted:#5b6573;--line:#d9dee5;--bg:#ffffff;--panel:#f5f7fa;
--critical:#b3001b;--error:#d6452f;--warning:#c98a00;--info:#2d7fb8;--commit:#2f9e55;--abort:#e0a100;--open:#d6452f}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1480px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:32px 0 12px;border-bottom:1px solid var(--line);padding-bottom:6px}
h3{font-size:16px;margin:22px 0 8px}
.sub{color:var(--muted);margin:0 0 18px}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:12.5px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:8px 0 18px}
.card{border:1px solid var(--line);border-radius:8px;padding:10px 16px;min-width:120px;background:var(--panel)}
.card .n{font-size:26px;font-weight:650}.card .k{color:var(--muted);text-transform:uppercase;font-size:11px;letter-spacing:.06em}
.card.critical .n{color:var(--critical)}.card.error .n{color:var(--error)}.card.warning .n{color:var(--warning)}.card.info .n{color:var(--info)}
.card.zero .n{color:#9aa3ad}
table{border-collapse:collapse;width:100%}
table.kv td{padding:4px 10px;border-bottom:1px solid var(--line);vertical-align:top;overflow-wrap:anywhere}
table.kv td:first-child{font-weight:600;white-space:nowrap;width:1%;color:var(--muted)}
table.findings{margin:6px 0 4px;font-size:13px}
table.findings th{text-align:left;background:var(--panel);border-bottom:2px solid var(--line);padding:6px 8px;vertical-align:bottom}
table.findings td{border-bottom:1px solid var(--line);padding:6px 8px;vertical-align:top}
table.findings td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.findings td.msg{min-width:280px;overflow-wrap:anywhere}
table.findings td.id{overflow-wrap:anywhere;max-width:220px}
table.findings td.ts{white-space:nowrap;font-variant-numeric:tabular-nums}
tr.detail td{background:#fbfcfd;border-bottom:2px solid var(--line)}
.sev{display:inline-block;border-radius:4px;padding:1px 7px;font-size:12px;font-weight:650;color:#fff}
.sev.critical{background:var(--critical)}.sev.error{background:var(--error)}.sev.warning{background:var(--warning)}.sev.info{background:var(--info)}
pre{background:#0f1720;color:#e6edf3;border-radius:6px;padding:10px 12px;overflow-x:auto;margin:6px 0;white-space:pre}
pre .c{color:#8b96a3}
tr.detail pre{white-space:pre-wrap;overflow-wrap:anywhere}
details summary{cursor:pointer;color:var(--muted)}
dl.ev{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:6px 0}
dl.ev dt{color:var(--muted)}dl.ev dd{margin:0;overflow-wrap:anywhere}
.partition{border:1px solid var(--line);border-radius:8px;padding:12px 16px 8px;margin:14px 0;background:#fff}
.partition h3{margin:0 0 2px}.partition .where{color:var(--muted);font-size:12.5px;margin:0 0 8px;overflow-wrap:anywhere}
.plots{display:grid;grid-template-columns:1fr;gap:4px}
figure{margin:0}figcaption{color:var(--muted);font-size:12.5px;margin:2px 0 6px}
svg.chart{width:100%;height:auto;display:block}
svg .grid{stroke:#e8ecf1;stroke-width:1}svg .axis{stroke:#9aa3ad;stroke-width:1}
svg .tick{fill:#5b6573;font-size:10.5px;font-family:system-ui,sans-serif}
svg .label{fill:#5b6573;font-size:11px;font-family:system-ui,sans-serif}
svg .lane-label{fill:#1d2430;font-size:11px;font-family:ui-monospace,Menlo,Consolas,monospace}
svg .lane{stroke:#eef1f4;stroke-width:1}
svg .lag-area{fill:rgba(214,69,47,.16)}svg .lag-line{fill:none;stroke:#d6452f;stroke-width:1.8}
svg .hover{fill:transparent}svg .hover:hover{fill:rgba(29,36,48,.06)}
svg .txn.commit{fill:var(--commit)}svg .txn.abort{fill:var(--abort)}svg .txn.marker-only{fill:#9aa3ad}
svg .txn.open{fill:var(--open);fill-opacity:.85}
svg .marker{stroke-width:2}svg .marker.commit{stroke:#1d6b38}svg .marker.abort{stroke:#9a6a00}
svg .finding{fill:#b3001b;stroke:#fff;stroke-width:1}svg .finding-line{stroke:#b3001b;stroke-dasharray:3 3;stroke-width:1}
.muted{color:var(--muted)}
footer{margin-top:40px;color:var(--muted);font-size:12px}
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

_NUMERIC = {"Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset"}


def _summary(report: Report) -> str:
    cards = []
    for sev, n in report.by_severity().items():
        cards.append(f'<div class="card {sev}{" zero" if n == 0 else ""}"><div class="n">{n}</div><div class="k">{sev}</div></div>')
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in summary_rows(report))
    return f'<div class="cards">{"".join(cards)}</div><table class="kv">{rows}</table>'


def _finding_numbers(report: Report) -> dict[int, int]:
    """id(finding) → its row number, counted in display order (rules, then rows) across the
    whole page: the anchor #f-N and the plot markers use it."""
    ordered = [f for fs in report.by_rule().values() for f in fs]
    return {id(f): i + 1 for i, f in enumerate(ordered)}


def _partitions(report: Report, numbers: dict[int, int]) -> str:
    parts = report.affected_plots()
    if not parts:
        return ""
    out = ['<h2 id="partitions">Partitions with findings</h2>']
    omitted = report.plots.get("omitted_partitions") or 0
    for p in parts:
        fs = [(numbers[id(f)], f) for f in report.findings
              if (f.get("cluster_id"), f.get("topic"), f.get("partition")) == (p.get("cluster_id"), p.get("topic"), p.get("partition"))]
        links = ", ".join(f'<a href="#f-{n}">#{n} {esc(f["rule"])}</a>' for n, f in fs)
        facts = [f"log end {esc(p.get('log_end_offset'))}", *_lso_facts(p)]
        out.append(
            f'<article class="partition"><h3>{esc(p.get("topic"))}-{esc(p.get("partition"))}</h3>'
            f'<p class="where">broker {esc(p.get("broker_id"))} · {esc(p.get("log_dir"))} · cluster {esc(p.get("cluster_id"))}'
            f' · {" · ".join(facts)} · findings: {links}</p>{_plots(p, fs)}</article>')
    if omitted:
        out.append(f'<p class="muted">{omitted} more partitions with findings have no plots (the report keeps the most severe).</p>')
    return "".join(out)


def _lso_facts(p: dict) -> list[str]:
    """The partition's high watermark and LSO as the producer-state model gives them
    (``last_stable_offsets``, saved in the plot data): the lso_lag series is only charted."""
    hw = p.get("high_watermark")
    if "last_stable_offset" not in p:  # plot data of an audit before report data version 2
        return [f"high watermark {esc(hw) if hw is not None else 'n/a'}", "LSO n/a (re-run the audit)"]
    no_checkpoint = hw is not None and p.get("checkpoint_high_watermark") is None
    facts = [f"high watermark {esc(hw) if hw is not None else 'n/a'}" + (" (the log end: no checkpoint)" if no_checkpoint else "")]
    lso = p.get("last_stable_offset")
    text = f'<span class="lso-now">LSO {esc(lso) if lso is not None else "n/a"}</span>'
    fuo, n = p.get("first_unstable_offset"), p.get("open_transactions") or 0
    if fuo is not None:
        text += f" (first unstable offset {esc(fuo)}, {esc(n)} open transaction{'' if n == 1 else 's'})"
    elif lso is not None:
        text += " (no open transaction)"
    facts.append(text)
    return facts


def _plots(p: dict, fs: list[tuple[int, dict]]) -> str:
    if not p.get("transactions_total") and not any(pt.get("lag") for pt in p.get("lso_lag") or []):
        # idempotent or plain writes only: a flat LSO line and empty lanes would say nothing
        return ('<p class="muted">No transactional data on this partition: its last stable offset follows the '
                "log end throughout, so there is no LSO lag or producer session to chart.</p>")
    return ('<div class="plots"><figure><figcaption>LSO lag over time: offsets the last stable offset trails the '
            f"log end</figcaption>{lso_lag_chart(p, fs)}</figure><figure><figcaption>Producer sessions on the same "
            "time axis: one bar per transaction, first batch to marker (hover for offsets and epochs)</figcaption>"
            f"{session_chart(p, fs)}</figure></div>")


def _commands_pre(lines: list[str]) -> str:
    body = "\n".join(f'<span class="c">{esc(line)}</span>' if line.startswith("#") else esc(line) for line in lines)
    return f"<pre>{body}</pre>"


def _findings(report: Report, numbers: dict[int, int]) -> str:
    if not report.findings:
        return '<h2 id="findings">Findings</h2><p>No findings' + (" match the filters." if report.filters.active else ".") + "</p>"
    out = ['<h2 id="findings">Findings</h2>']
    for rule, fs in report.by_rule().items():
        values = {h: [fn(f) for f in fs] for h, fn in COLUMNS}
        kept = [h for h, _ in COLUMNS if any(values[h])]
        # CamelCase headers may break between words (<wbr>): the table has to fit next to the message
        head = "".join(f"<th>{re.sub(r'(?<=[a-z])(?=[A-Z])', '<wbr>', h)}</th>" for h in ["#", "Severity", *kept, "Message"])
        rows = []
        for i, f in enumerate(fs):
            n = numbers[id(f)]
            cells = [f'<td class="num">{n}</td>', f'<td><span class="sev {esc(f["severity"])}">{esc(f["severity"])}</span></td>']
            for h in kept:
                cls = "num" if h in _NUMERIC else {"TransactionalId": "id", "LastTimestamp": "ts"}.get(h, "")
                cells.append(f'<td class="{cls}">{esc(values[h][i])}</td>')
            cells.append(f'<td class="msg">{esc(f.get("message"))}</td>')
            rows.append(f'<tr class="finding" id="f-{n}">{"".join(cells)}</tr>')
            detail = []
            cmds = report.commands(f)
            if cmds:
                lines = []
                for c in cmds:
                    lines.append(c["command"] if not c["applies_to"] else f"# {c['applies_to']}: {c['command']}")
                detail.append(_commands_pre(lines))
            if f.get("remediation"):
                detail.append(f'<p><b>Remediation:</b> {esc(f["remediation"])}</p>')
            ev = f.get("evidence") or {}
            where = " · ".join(esc(x) for x in (f.get("cluster_id"), *_replica_texts(f)) if x)
            times = ""
            if f.get("first_timestamp") is not None:
                times = f"{format_time(f['first_timestamp'])} … {format_time(f.get('last_timestamp'))}"
            if ev or where:
                dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in ev.items() if v not in (None, ""))
                detail.append(f'<details><summary>Evidence</summary><dl class="ev"><dt>where</dt><dd>{where}</dd>'
                              f'<dt>offsets</dt><dd>{esc(f.get("first_offset"))} … {esc(f.get("last_offset"))}</dd>'
                              f'<dt>time</dt><dd>{esc(times)}</dd>{dl}</dl></details>')
            rows.append(f'<tr class="detail"><td></td><td colspan="{len(kept) + 2}">{"".join(detail)}</td></tr>')
        out.append(f'<h3 id="rule-{esc(rule)}">{esc(rule)} <span class="muted">({len(fs)})</span></h3>'
                   f'<table class="findings"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')
    all_cmds = _all_commands(report, numbers)
    if all_cmds:
        out.append('<h3 id="remediation">All remediation commands</h3><p class="muted">Paste as a whole: each block '
                   "aborts one transaction with <code>--start-offset</code>; the form for brokers before 3.0 is commented out.</p>")
        out.append(_commands_pre(all_cmds))
    return "".join(out)


def _replica_texts(f: dict) -> list[str]:
    """Where a finding was seen: each replica (broker and log dir) that shows it."""
    reps = f.get("replicas") or [{"broker_id": f.get("broker_id"), "log_dir": f.get("log_dir")}]
    out = []
    for r in reps:
        parts = [f"broker {r['broker_id']}" if r.get("broker_id") is not None else None, r.get("log_dir")]
        out.append(" ".join(x for x in parts if x))
    return out


def _all_commands(report: Report, numbers: dict[int, int]) -> list[str]:
    """Every distinct remediation once (hanging-transaction and stuck-lso name the same abort),
    as a shell block: a comment naming the findings, the command, the older form commented out."""
    blocks: dict[tuple, tuple[dict, list[dict[str, str | None]], list[int]]] = {}
    for f in report.findings:
        cmds = report.commands(f)
        if cmds:
            blocks.setdefault(tuple(c["command"] for c in cmds), (f, cmds, []))[2].append(numbers[id(f)])
    lines: list[str] = []
    for f, cmds, ns in blocks.values():
        refs = ", ".join(f"#{n}" for n in ns)
        lines.append(f"# {refs}: {one_line(f.get('topic'))}-{f.get('partition')} from offset {f.get('first_offset')} "
                     f"(producer {f.get('producer_id')})")
        lines += [c["command"] if not c["applies_to"] else f"# {c['applies_to']}: {c['command']}" for c in cmds]
    return lines


def render_html(report: Report) -> str:
    numbers = _finding_numbers(report)
    run = report.run
    sub = " · ".join(x for x in (
        f"run {esc(run.get('run_id'))}" if run.get("run_id") else "",
        f"ages as of {esc(format_time(run.get('as_of_ms')))}" if run.get("as_of_ms") else "",
        f"{len(report.findings)} findings" + (f" of {report.total_findings} (filtered)" if report.filters.active else ""),
    ) if x)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>txn-audit report</title><style>{CSS}</style></head><body><main>"
        f'<h1>txn-audit report</h1><p class="sub">{sub}</p>'
        f'<section id="summary">{_summary(report)}</section>'
        f"<section>{_partitions(report, numbers)}</section>"
        f"<section>{_findings(report, numbers)}</section>"
        f"<footer>Generated by txn-audit {esc(__version__)} — self-contained: no scripts, no external resources.</footer>"
        "</main></body></html>\n"
    )
