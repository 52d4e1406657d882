"""``--format html``: one self-contained page, read top-down by someone on call.

Order: title and a compact run summary; the findings summary (one row per
finding, worst first: severity, rule/kind, topic-partition@offset, producer,
age; links to the finding's detail ``#f-N`` and its partition card ``#p-N``)
so the worst is in the first screenful; the findings as incidents
(:meth:`~auditor.report.model.Report.incidents`: a hanging transaction and the
LSO it pins are one problem), one block each with one set of commands and each
advice once per (rule, kind); info findings, often dozens of in-flight
transactions, are folded away in both lists (a closed ``<details>`` saying how
many) so they cannot bury a critical one; the remediation commands grouped per cluster (a block
is pasted against one cluster: ``<broker:port>`` is a broker of that cluster);
then the partition chart cards. Long commands wrap inside their box: nothing
is cut off sideways.

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
from auditor.report.model import BROKER_PLACEHOLDER, Incident, Report, format_duration, format_time, one_line
from auditor.report.render_table import COLUMNS, also_text, incident_commands, summary_rows
from auditor.report.svg import esc, lso_lag_chart, session_chart

CSS = """
:root{--fg:#1d2430;--muted:#5b6573;--line:#d9dee5;--bg:#ffffff;--panel:#f5f7fa;
--critical:#b3001b;--error:#d6452f;--warning:#c98a00;--info:#2d7fb8;--commit:#2f9e55;--abort:#e0a100;--open:#d6452f}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1480px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:32px 0 12px;border-bottom:1px solid var(--line);padding-bottom:6px}
h3{font-size:16px;margin:22px 0 8px}
h1,h2,h3,figcaption{overflow-wrap:anywhere}
.sub{color:var(--muted);margin:0 0 18px}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:12.5px}
.cards{display:flex;gap:8px;flex-wrap:wrap;margin:4px 0 8px}
.card{border:1px solid var(--line);border-radius:8px;padding:3px 12px;min-width:92px;background:var(--panel)}
.card .n{font-size:20px;font-weight:650}.card .k{color:var(--muted);text-transform:uppercase;font-size:11px;letter-spacing:.06em}
.card.critical .n{color:var(--critical)}.card.error .n{color:var(--error)}.card.warning .n{color:var(--warning)}.card.info .n{color:var(--info)}
.card.zero .n{color:#9aa3ad}
table{border-collapse:collapse;width:100%}
table.kv td{padding:4px 10px;border-bottom:1px solid var(--line);vertical-align:top;overflow-wrap:anywhere}
table.kv td:first-child{font-weight:600;white-space:nowrap;width:1%;color:var(--muted)}
table.findings{margin:6px 0 4px;font-size:13px}
table.findings th{text-align:left;background:var(--panel);border-bottom:2px solid var(--line);padding:6px 8px;vertical-align:bottom}
table.findings td{border-bottom:1px solid var(--line);padding:6px 8px;vertical-align:top}
table.findings td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.findings td.msg{min-width:200px;overflow-wrap:anywhere}
table.findings td.topic{overflow-wrap:anywhere;min-width:8.5em}
table.findings .kind{display:block;color:var(--muted);font-size:12px;margin-top:2px}
table.findings td.id{overflow-wrap:anywhere;max-width:220px}
table.findings td.ts{font-variant-numeric:tabular-nums}
tr.detail td{background:#fbfcfd;border-bottom:2px solid var(--line)}
tbody.incident{border-top:3px solid var(--line)}
tbody.incident.critical tr.lead td:first-child{box-shadow:inset 4px 0 var(--critical)}
tbody.incident.error tr.lead td:first-child{box-shadow:inset 4px 0 var(--error)}
tbody.incident.warning tr.lead td:first-child{box-shadow:inset 4px 0 var(--warning)}
tr.finding.also td{border-bottom:none;padding-top:2px;padding-bottom:2px;color:var(--muted);font-size:12.5px}
tr.finding.also td.also{overflow-wrap:anywhere}tr.finding.also td.also::before{content:"\\21B3  "}
table.overview tr.also td.rule{padding-left:22px}table.overview tr.also td.rule::before{content:"\\21B3  ";color:var(--muted)}
details.info-rows,details.info-incidents{margin:8px 0;border:1px solid var(--line);border-radius:6px;padding:6px 10px}
details.info-rows>summary,details.info-incidents>summary{font-weight:600}
p.evh{margin:6px 0 0;font-weight:600;color:var(--muted)}
.sev{display:inline-block;border-radius:4px;padding:1px 7px;font-size:12px;font-weight:650;color:#fff}
.sev.critical{background:var(--critical)}.sev.error{background:var(--error)}.sev.warning{background:var(--warning)}.sev.info{background:var(--info)}
/* long commands wrap inside their box (a soft wrap: pasting keeps one line per command) */
pre{background:#0f1720;color:#e6edf3;border-radius:6px;padding:10px 12px;overflow-x:auto;margin:6px 0;white-space:pre-wrap;overflow-wrap:anywhere;max-width:100%}
code{overflow-wrap:anywhere}
pre .c{color:#8b96a3}
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
nav.toc{display:flex;flex-wrap:wrap;gap:4px 16px;margin:0 0 8px;font-size:13.5px}
nav.toc a{text-decoration:none}nav.toc a:hover{text-decoration:underline}
p.facts{margin:0 0 6px;color:var(--muted);overflow-wrap:anywhere}
details.run{margin:0 0 8px}details.run table.kv{margin-top:6px}
.scroll{overflow-x:auto;max-width:100%}
h2#overview-h{margin-top:14px}
table.overview{font-size:13px}
table.overview th{text-align:left;background:var(--panel);border-bottom:2px solid var(--line);padding:4px 8px}
table.overview td{border-bottom:1px solid var(--line);padding:3px 8px;vertical-align:top}
table.overview td.where,table.overview td.who{overflow-wrap:anywhere}
table.overview td.num,table.overview td.age{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
.advice{border-left:3px solid var(--info);background:var(--panel);padding:6px 12px;margin:6px 0 10px}
.advice p{margin:2px 0}.advice .refs{color:var(--muted);font-size:12.5px}
.cluster{border:1px solid var(--line);border-radius:8px;padding:4px 16px 10px;margin:12px 0}
.cluster h3{margin:10px 0 2px;overflow-wrap:anywhere}.cluster .where{color:var(--muted);font-size:12.5px;margin:0 0 6px;overflow-wrap:anywhere}
p.warn{border-left:3px solid var(--warning);padding:4px 10px;background:#fff8e6}
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

_NUMERIC = {"Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset"}


def _pkey(f: dict) -> tuple:
    return (f.get("cluster_id"), f.get("topic"), f.get("partition"))


def _summary(report: Report) -> str:
    """Severity cards, one line of key facts, and every summary row folded away (run details)."""
    cards = []
    for sev, n in report.by_severity().items():
        cards.append(f'<div class="card {esc(sev)}{" zero" if n == 0 else ""}"><div class="n">{n}</div><div class="k">{esc(sev)}</div></div>')
    s = report.summary
    facts = []
    if s.get("clusters"):
        facts.append(f"{len(s['clusters'])} cluster{'' if len(s['clusters']) == 1 else 's'}")
    if s.get("brokers"):
        facts.append(f"{len(s['brokers'])} broker log dir{'' if len(s['brokers']) == 1 else 's'}")
    if s:
        facts.append(f"{s.get('partitions', 0):,} partitions")
        facts.append(f"{s.get('batches', 0):,} batches")
        tx = s.get("transactions") or {}
        if tx:
            facts.append(f"{sum(v or 0 for v in tx.values()):,} transactions ({tx.get('open', 0):,} open)")
        tr = s.get("time_range") or {}
        if tr.get("first_ms") is not None:
            facts.append(f"{format_time(tr['first_ms'])} … {format_time(tr.get('last_ms'))}")
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in summary_rows(report))
    fact_line = f'<p class="facts">{esc(" · ".join(facts))}</p>' if facts else ""
    return (f'<div class="cards">{"".join(cards)}</div>{fact_line}'
            f'<details class="run" id="run"><summary>Run details: inputs, clusters, brokers, transactions, '
            f'versions</summary><table class="kv">{rows}</table></details>')


def _split(incidents: list[Incident]) -> tuple[list[Incident], list[Incident]]:
    """(incidents to act on, info incidents). Info ones are folded away on the page: dozens of
    in-flight transactions would otherwise push the one critical incident out of the first screen."""
    return [i for i in incidents if i.severity != "info"], [i for i in incidents if i.severity == "info"]


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _info_summary(info: list[Incident]) -> str:
    """What a folded info section holds, said on its (closed) summary line."""
    n = sum(len(i.findings) for i in info)
    return f"{_count(n, 'info finding')} ({_count(len(info), 'incident')}): for context, no action expected"


def _finding_numbers(incidents: list[Incident]) -> dict[int, int]:
    """id(finding) → its number, counted in display order (incidents worst first, each lead then
    its further findings) across the whole page: the anchor #f-N and the plot markers use it."""
    ordered = [f for inc in incidents for f in inc.findings]
    return {id(f): i + 1 for i, f in enumerate(ordered)}


def _card_anchors(report: Report) -> dict[tuple, str]:
    """(cluster, topic, partition) → the id of its partition card (``p-N``, in card order)."""
    return {_pkey(p): f"p-{i + 1}" for i, p in enumerate(report.affected_plots())}


def _where(f: dict) -> str:
    """``topic-partition@offset`` (or what of it the finding has)."""
    place = ""
    if f.get("topic") is not None or f.get("partition") is not None:
        place = f"{one_line(f.get('topic')) or '?'}-{one_line(f.get('partition'))}"
    if f.get("first_offset") is not None:
        place += f"@{f['first_offset']}" if place else f"offset {f['first_offset']}"
    return place or "—"


def _producer(f: dict) -> str:
    parts = []
    if f.get("producer_id") is not None:
        parts.append(f"producer {f['producer_id']}" + (f" epoch {f['producer_epoch']}" if f.get("producer_epoch") is not None else ""))
    if f.get("transactional_id"):
        parts.append(one_line(f["transactional_id"]))
    return " · ".join(parts)


def _overview_row(f: dict, n: int, anchor: str | None, multi: bool, also: bool) -> str:
    """One summary row; a further finding of an incident (``also``) is indented under its lead."""
    sev = esc(f.get("severity"))
    kind = f" · {esc(f['kind'])}" if f.get("kind") else ""
    cells = [f'<td class="num"><a href="#f-{n}">{n}</a></td>', f'<td><span class="sev {sev}">{sev}</span></td>',
             f'<td class="rule"><a href="#f-{n}">{esc(f.get("rule"))}{kind}</a></td>',
             f'<td class="where mono">{esc(_where(f))}</td>']
    if multi:
        cells.append(f'<td class="where mono">{esc(f.get("cluster_id"))}</td>')
    cells.append(f'<td class="who">{esc(_producer(f))}</td>')
    cells.append(f'<td class="age">{esc(format_duration(f.get("duration_ms")))}</td>')
    cells.append(f'<td><a href="#{anchor}">chart</a></td>' if anchor else '<td class="muted">—</td>')
    return f'<tr class="overview-row{" also" if also else ""}">{"".join(cells)}</tr>'


def _overview(report: Report, incidents: list[Incident], numbers: dict[int, int], cards: dict[tuple, str]) -> str:
    """The findings summary: one row per finding, worst first, an incident's further findings
    right under its lead; the info rows folded away (a closed ``<details>`` saying how many)."""
    if not report.findings:
        return ""
    multi = len({f.get("cluster_id") for f in report.findings}) > 1
    head = ["#", "Severity", "Rule / kind", "Where (topic-partition@offset)", *(["Cluster"] if multi else []),
            "Producer / transactional id", "Age", "Chart"]
    thead = f'<thead><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr></thead>'

    def table(incs: list[Incident]) -> str:
        rows = "".join(_overview_row(f, numbers[id(f)], cards.get(_pkey(f)), multi, j > 0)
                       for inc in incs for j, f in enumerate(inc.findings))
        return f'<div class="scroll"><table class="overview">{thead}<tbody>{rows}</tbody></table></div>'

    main, info = _split(incidents)
    out = [f'<h2 id="overview-h">Findings summary <span class="muted">({_count(len(report.findings), "finding")}, '
           f'{_count(len(incidents), "incident")}, worst first)</span></h2><div id="overview">']
    out.append(table(main) if main else '<p class="muted">No critical, error or warning findings.</p>')
    if info:
        out.append(f'<details class="info-rows" id="overview-info"><summary>{esc(_info_summary(info))}</summary>'
                   f"{table(info)}</details>")
    out.append("</div>")
    return "".join(out)


def _partitions(report: Report, numbers: dict[int, int], cards: dict[tuple, str]) -> str:
    parts = report.affected_plots()
    if not parts:
        return ""
    out = ['<h2 id="partitions">Partitions with findings</h2>']
    omitted = report.plots.get("omitted_partitions") or 0
    for p in parts:
        fs = sorted(((numbers[id(f)], f) for f in report.findings if _pkey(f) == _pkey(p)), key=lambda x: x[0])
        links = ", ".join(f'<a href="#f-{n}">#{n} {esc(f["rule"])}</a>' for n, f in fs)
        facts = [*([f"log end {esc(p['log_end_offset'])}"] if p.get("log_end_offset") is not None else []), *_lso_facts(p)]
        where = " · ".join(x for x in (
            f"broker {esc(p['broker_id'])}" if p.get("broker_id") is not None else "", esc(p.get("log_dir")),
            f"cluster {esc(p['cluster_id'])}" if p.get("cluster_id") is not None else "", *facts) if x)
        # the anchor wraps the card: the card itself keeps its plain <article class="partition"><h3> shape
        out.append(
            f'<div class="card-anchor" id="{cards[_pkey(p)]}"><article class="partition"><h3>{esc(p.get("topic"))}-{esc(p.get("partition"))}</h3>'
            f'<p class="where">{where} · findings: {links}</p>{_plots(p, fs)}</article></div>')
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


def _refs(ns: list[int]) -> str:
    return ", ".join(f'<a href="#f-{n}">#{n}</a>' for n in ns)


def _advice_key(f: dict) -> tuple | None:
    return (f.get("rule"), f.get("kind") or "", f["remediation"]) if f.get("remediation") else None


def _advice_index(incidents: list[Incident], numbers: dict[int, int]) -> dict[tuple, tuple[str, list[int]]]:
    """Each distinct advice once per (rule, kind): key → (its anchor ``adv-N``, the numbers of the
    findings it applies to), in display order. The box is printed in the first incident that needs
    it; the later ones link to it."""
    out: dict[tuple, tuple[str, list[int]]] = {}
    for inc in incidents:
        for f in inc.findings:
            key = _advice_key(f)
            if key is not None:
                out.setdefault(key, (f"adv-{len(out) + 1}", []))[1].append(numbers[id(f)])
    return out


def _advice_html(f: dict, advices: dict[tuple, tuple[str, list[int]]], printed: set) -> str:
    """The advice of finding ``f``: the whole box the first time its (rule, kind) comes up, a link after."""
    key = _advice_key(f)
    if key is None:
        return ""
    anchor, ns = advices[key]
    rule, kind = esc(f.get("rule")), esc(f.get("kind") or "advice")
    if key in printed:
        return f'<p class="muted">Advice: <a href="#{anchor}">{rule} · {kind}</a> (given above, with finding #{ns[0]})</p>'
    printed.add(key)
    return (f'<div class="advice" id="{anchor}"><p><b>{rule} · {kind}</b> <span class="refs">'
            f'({_count(len(ns), "finding")}: {_refs(ns)})</span></p><p>{esc(f["remediation"])}</p></div>')


def _span(a: object, b: object, sep: str = " … ") -> str:
    """``a … b``, or the one that is known, or nothing: an unknown bound is left out, never "None"."""
    known = [one_line(x) for x in (a, b) if x is not None and x != ""]
    if not known:
        return ""
    return known[0] if len(known) == 1 or (len(known) == 2 and known[0] == known[1]) else sep.join(known)


def _evidence(inc: Incident, numbers: dict[int, int]) -> str:
    """Where, offsets, time and the rule's evidence of each finding of the incident, folded away."""
    blocks = []
    for f in inc.findings:
        times = _span(format_time(f.get("first_timestamp")) or None, format_time(f.get("last_timestamp")) or None)
        rows = [("where", " · ".join(x for x in (one_line(f.get("cluster_id")), *_replica_texts(f)) if x)),
                ("offsets", _span(f.get("first_offset"), f.get("last_offset"))), ("time", times),
                *((f.get("evidence") or {}).items())]
        dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows if v not in (None, ""))
        if not dl:
            continue
        head = (f'<p class="evh">#{numbers[id(f)]} {esc(f.get("rule"))} · {esc(f.get("kind"))}</p>'
                if len(inc.findings) > 1 else "")
        blocks.append(f'{head}<dl class="ev">{dl}</dl>')
    return f'<details><summary>Evidence</summary>{"".join(blocks)}</details>' if blocks else ""


def _incident_body(report: Report, inc: Incident, numbers: dict[int, int], kept: list[str],
                   advices: dict[tuple, tuple[str, list[int]]], printed: set) -> str:
    """One incident as one ``<tbody>`` block: its lead finding's row, one line per further finding
    (:func:`also_text`), then one set of commands for all of them (:func:`incident_commands`:
    a hanging transaction and the LSO it pins are aborted once), the advice and the evidence."""
    f = inc.lead
    n = numbers[id(f)]
    sev = esc(f.get("severity"))
    kind = f" · {esc(f['kind'])}" if f.get("kind") else ""
    cells = [f'<td class="num">{n}</td>',
             f'<td><span class="sev {sev}">{sev}</span><span class="kind">{esc(f.get("rule"))}{kind}</span></td>']
    for h, fn in COLUMNS:
        if h in kept:
            cls = "num" if h in _NUMERIC else {"TransactionalId": "id", "LastTimestamp": "ts", "Topic": "topic"}.get(h, "")
            text = esc(fn(f))
            if h == "LastTimestamp":  # the time may go under the date: the table has to fit
                text = text.replace("T", "T<wbr>", 1)
            cells.append(f'<td class="{cls}">{text}</td>')
    cells.append(f'<td class="msg">{esc(f.get("message"))}</td>')
    ncols = len(kept) + 2
    rows = [f'<tr class="finding lead" id="f-{n}">{"".join(cells)}</tr>']
    for other in inc.findings[1:]:
        m = numbers[id(other)]
        rows.append(f'<tr class="finding also" id="f-{m}"><td class="num">{m}</td>'
                    f'<td class="also" colspan="{ncols}">{esc(also_text(other))}</td></tr>')
    cmds = incident_commands(report, inc)
    detail = [_commands_pre(cmds) if cmds else "", *(_advice_html(x, advices, printed) for x in inc.findings),
              _evidence(inc, numbers)]
    rows.append(f'<tr class="detail"><td></td><td colspan="{ncols}">{"".join(detail)}</td></tr>')
    return f'<tbody class="incident {sev}" id="{esc(inc.id)}">{"".join(rows)}</tbody>'


def _incident_table(report: Report, incs: list[Incident], numbers: dict[int, int],
                    advices: dict[tuple, tuple[str, list[int]]], printed: set) -> str:
    """A table of incident blocks; a find-hanging column is kept when a lead has a value in it."""
    kept = [h for h, fn in COLUMNS if any(fn(i.lead) for i in incs)]
    # CamelCase headers may break between words (<wbr>): the table has to fit next to the message
    head = "".join(f"<th>{re.sub(r'(?<=[a-z])(?=[A-Z])', '<wbr>', h)}</th>"
                   for h in ["#", "Severity / rule", *kept, "Message"])
    bodies = "".join(_incident_body(report, inc, numbers, kept, advices, printed) for inc in incs)
    return f'<div class="scroll"><table class="findings"><thead><tr>{head}</tr></thead>{bodies}</table></div>'


def _findings(report: Report, incidents: list[Incident], numbers: dict[int, int]) -> str:
    """The incidents, worst first, one block each; the info ones folded away (closed ``<details>``)."""
    if not report.findings:
        return '<h2 id="findings">Findings</h2><p>No findings' + (" match the filters." if report.filters.active else ".") + "</p>"
    main, info = _split(incidents)
    advices = _advice_index(incidents, numbers)
    printed: set = set()
    out = ['<h2 id="findings">Findings</h2><p class="muted">One block per incident, worst first: findings about the '
           "same transaction (a hanging transaction and the last stable offset it pins) are one incident, with "
           "one set of commands.</p>"]
    if main:
        out.append(_incident_table(report, main, numbers, advices, printed))
    if info:
        out.append(f'<details class="info-incidents" id="findings-info"><summary>{esc(_info_summary(info))}</summary>'
                   f"{_incident_table(report, info, numbers, advices, printed)}</details>")
    return "".join(out)


def _replica_texts(f: dict) -> list[str]:
    """Where a finding was seen: each replica (broker and log dir) that shows it."""
    reps = f.get("replicas") or [{"broker_id": f.get("broker_id"), "log_dir": f.get("log_dir")}]
    out = []
    for r in reps:
        parts = [f"broker {r['broker_id']}" if r.get("broker_id") is not None else None, r.get("log_dir")]
        out.append(" ".join(x for x in parts if x))
    return out


def _cluster_brokers(report: Report, cluster: str | None, fs: list[dict]) -> list[tuple[object, object]]:
    """(broker id, log dir) of a cluster: the run summary's brokers, else the findings' replicas."""
    seen: dict[tuple, None] = {}
    for b in report.summary.get("brokers") or []:
        if (b or {}).get("cluster_id") == cluster:
            seen[(b.get("broker_id"), b.get("log_dir"))] = None
    if not seen:
        for c in report.summary.get("clusters") or []:
            if (c or {}).get("cluster_id") == cluster:
                for b in c.get("brokers") or []:
                    seen[(b, None)] = None
    if not seen:
        for f in fs:
            for r in f.get("replicas") or [{"broker_id": f.get("broker_id"), "log_dir": f.get("log_dir")}]:
                seen[(r.get("broker_id"), r.get("log_dir"))] = None
    return list(seen)


def _remediation(report: Report, numbers: dict[int, int]) -> str:
    """Every distinct remediation once per cluster (hanging-transaction and stuck-lso name the
    same abort), one shell block per cluster: a comment naming the findings, the command, the
    older form commented out. A block is pasted against its own cluster only."""
    clusters: dict[object, dict[tuple, tuple[dict, list[dict], list[int]]]] = {}
    members: dict[object, list[dict]] = {}
    for f in sorted(report.findings, key=lambda f: numbers[id(f)]):
        cmds = report.commands(f)
        if not cmds:
            continue
        cid = f.get("cluster_id")
        members.setdefault(cid, []).append(f)
        clusters.setdefault(cid, {}).setdefault(tuple(c["command"] for c in cmds), (f, cmds, []))[2].append(numbers[id(f)])
    if not clusters:
        return ""
    bs = report.bootstrap_server
    target = f"<code>{esc(bs)}</code>" if bs else f"<code>{esc(BROKER_PLACEHOLDER)}</code>"
    out = ['<h2 id="remediation">Remediation commands, per cluster</h2>',
           f'<p class="muted">One block per cluster. Paste a block as a whole against <b>its</b> cluster only: {target} '
           "must be a broker of that cluster. Each command aborts one transaction with <code>--start-offset</code>; the "
           "form for brokers before 3.0 is commented out.</p>"]
    if bs and len(clusters) > 1:
        out.append(f'<p class="warn">The commands of all {len(clusters)} clusters name <code>--bootstrap-server {esc(bs)}</code>: '
                   "it is a broker of at most one of them. Replace it in the other clusters' blocks with one of their brokers.</p>")
    for i, (cid, blocks) in enumerate(clusters.items()):
        brokers = _cluster_brokers(report, cid, members[cid])
        shown = ", ".join(f"{one_line(b) if b is not None else '?'}" + (f" ({one_line(d)})" if d else "") for b, d in brokers[:6])
        more = f" … {len(brokers) - 6} more" if len(brokers) > 6 else ""
        ids = sorted({str(b) for b, _ in brokers if b is not None})
        name = one_line(cid) if cid is not None else "unknown cluster (no meta.properties)"
        lines: list[str] = []
        for f, cmds, ns in blocks.values():
            refs = ", ".join(f"#{n}" for n in ns)
            who = f" (producer {f['producer_id']})" if f.get("producer_id") is not None else ""
            lines.append(f"# {refs}: {_where(f)}{who}")
            lines += [c["command"] if not c["applies_to"] else f"# {c['applies_to']}: {c['command']}" for c in cmds]
        which = (f"broker {', '.join(ids)}" if len(ids) == 1 else f"one of brokers {', '.join(ids)}") if ids else "a broker"
        out.append(
            f'<div class="cluster" id="rem-{i + 1}"><h3>Cluster <span class="mono">{esc(name)}</span></h3>'
            f'<p class="where">brokers: {esc(shown + more) or "unknown"} · findings {_refs([n for *_, ns in blocks.values() for n in ns])}</p>'
            f'<p>Paste as a whole against this cluster: {target} must be {esc(which)} of cluster '
            f'<span class="mono">{esc(name)}</span>{"" if len(clusters) == 1 else ", not a broker of another cluster in this report"}.</p>'
            f"{_commands_pre(lines)}</div>")
    return "".join(out)


def render_html(report: Report) -> str:
    """The whole page (see the module docstring for its order)."""
    incidents = report.incidents()
    numbers = _finding_numbers(incidents)
    cards = _card_anchors(report)
    run = report.run
    sub = " · ".join(x for x in (
        f"run {esc(run.get('run_id'))}" if run.get("run_id") else "",
        f"ages as of {esc(format_time(run.get('as_of_ms')))}" if run.get("as_of_ms") else "",
        esc(report.timeout_text()) if report.timeout_text() else "",
        f"{len(report.findings)} findings" + (f" of {report.total_findings} (filtered)" if report.filters.active else "")
        + (f" in {_count(len(incidents), 'incident')}" if len(incidents) < len(report.findings) else ""),
    ) if x)
    remediation = _remediation(report, numbers)
    nav = [f'<a href="#overview-h">Findings summary ({len(report.findings)})</a>', '<a href="#findings">Findings</a>']
    if remediation:
        nav.append('<a href="#remediation">Remediation</a>')
    if cards:
        nav.append(f'<a href="#partitions">Partitions ({len(cards)})</a>')
    nav.append('<a href="#run">Run details</a>')
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>txn-audit report</title><style>{CSS}</style></head><body><main>"
        f'<h1>txn-audit report</h1><p class="sub">{sub}</p>'
        f'<nav class="toc">{"".join(nav)}</nav>'
        f'<section id="summary">{_summary(report)}</section>'
        f"<section>{_overview(report, incidents, numbers, cards)}</section>"
        f"<section>{_findings(report, incidents, numbers)}</section>"
        f"<section>{remediation}</section>"
        f"<section>{_partitions(report, numbers, cards)}</section>"
        f"<footer>Generated by txn-audit {esc(__version__)} — self-contained: no scripts, no external resources.</footer>"
        "</main></body></html>\n"
    )
