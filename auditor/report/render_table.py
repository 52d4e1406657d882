"""``--format table``: the terminal report, designed for 80 to 120 columns.

The first screen is the answer: a summary of a few lines (findings by severity and
incidents, what was read, the instant ages are measured against and where it comes from,
caveats: ``Input lacks``; with ``--baseline``, what changed since), then one block per
incident (:meth:`auditor.report.model.Report.incidents`), worst first, each as

* one header line of its lead finding: severity, ``rule/kind``, ``[new]``/``[still open]``
  against a baseline, ``topic-partition@offset``, producer id/epoch, transactional id, age
  (then cluster / brokers when the report spans several), packed field by field -- a field is
  never split, a header that does not fit continues on an indented line;
* its message, wrapped at spaces (never at hyphens: rule ids, topic names and timestamps stay
  whole), then one ``also`` line per further finding of the incident (the stuck LSO a hanging
  transaction pins);
* the incident's commands, each once: the ``--start-offset`` abort and the next forensic command
  (:meth:`auditor.report.model.Report.next_command`, ``txn-audit timeline``), broken between
  options with `` \\`` continuations so that pasted they are the command (the form for brokers
  before 3.0 is in the other formats: every broker the tool supports takes ``--start-offset``);
* the lead kind's advice, printed once per kind (identical advice is not repeated).

The baseline's resolved findings follow, one line each; then what the summary counts, listed
when it is more than one (inputs, clusters, brokers). Every value from the dump (topics,
transactional ids, paths, messages) goes through ``one_line`` and into
``rich.text.Text`` objects, never into markup strings: a transactional id like
``[red]x[/red]`` prints as itself, and a newline in a topic cannot forge a line.

:data:`COLUMNS` and :func:`summary_rows` (``kafka-transactions.sh find-hanging``'s
column names, the summary's facts) are shared with the Markdown and HTML reports.
"""

from __future__ import annotations

import re
import textwrap
from typing import Callable

from rich.console import Console
from rich.text import Text

from auditor.model.advice import LEGACY_FORM
from auditor.report.model import Incident, Report, coordinator_epoch, format_duration, format_time, one_line

SEVERITY_STYLE = {"critical": "bold white on red", "error": "bold red", "warning": "yellow", "info": "cyan"}
SEVERITY_WIDTH = max(len(s) for s in SEVERITY_STYLE)
INDENT = "  "
MIN_WIDTH = 40  # below this, wrap as if the terminal had 40 columns


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
        replicas = s.get("replicas", 0)
        rows.append(("Partitions", f"{s.get('partitions', 0):,}"
                     + (f" ({replicas:,} replicas)" if replicas and replicas != s.get("partitions") else "")))
        rows.append(("Batches", f"{s.get('batches', 0):,}"))
        tx = s.get("transactions") or {}
        if tx:
            names = {"commit": "committed", "abort": "aborted", "open": "open", "marker-only": "marker-only"}
            rows.append(("Transactions", ", ".join(f"{n:,} {names.get(k, k)}" for k, n in tx.items())))
        rows.append(("Transaction versions", transaction_versions_text(s.get("transaction_versions") or {})))
        tr = s.get("time_range") or {}
        if tr.get("first_ms") is not None:
            rows.append(("Time range", f"{format_time(tr['first_ms'])} … {format_time(tr['last_ms'])}"))
    if report.as_of_text():
        rows.append(("Ages as of", report.as_of_text().removeprefix("Ages as of ")))
    sev = report.by_severity()
    text = ", ".join(f"{n} {k}" for k, n in sev.items())
    if report.filters.active:
        text += f" (of {report.total_findings} before filters)"
    rows.append(("Findings", f"{len(report.findings)}: {text}"))
    if report.baseline is not None:
        rows.append(("Baseline", baseline_line(report).removeprefix("Since the baseline") .lstrip(" :")
                     + f" ({report.baseline.source})"))
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


# -- text layout -----------------------------------------------------------------------------------


def wrap(text: str, width: int, first: str = "", rest: str = INDENT) -> list[str]:
    """``text`` wrapped at spaces only (never inside a word, nor at a hyphen), the first
    line after ``first``, the others after ``rest``; a word longer than a line stays whole."""
    return textwrap.wrap(text, width=max(width, MIN_WIDTH), initial_indent=first, subsequent_indent=rest,
                         break_long_words=False, break_on_hyphens=False) or [first.rstrip()]


def pack(fields: list[str], width: int, rest: str, sep: str = "  ") -> list[str]:
    """``fields`` on lines of at most ``width`` (unless one field alone is longer), joined
    by ``sep``; a field is never split; continuation lines start with ``rest``."""
    width = max(width, MIN_WIDTH)
    lines: list[str] = []
    line = ""
    for f in fields:
        if not line:
            line = f
        elif len(line) + len(sep) + len(f) <= width:
            line += sep + f
        else:
            lines.append(line)
            line = rest + f
    if line:
        lines.append(line)
    return lines


# -- the summary ---------------------------------------------------------------------------------------


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (plural or word + 's')}"


def _findings_line(report: Report) -> str:
    n = len(report.findings)
    sev = ", ".join(f"{k} {s}" for s, k in ((s, k) for s, k in report.by_severity().items()) if k)
    text = _plural(n, "finding") + (f": {sev}" if sev else "")
    if report.filters.active:
        text += f" (of {report.total_findings} before filters)"
    incidents = len(report.incidents())
    if incidents < n:
        text += f" · {_plural(incidents, 'incident')}"
    return text


_LACK = re.compile(r"^(cluster|log dir) (\S+): (.+)$")


def input_lacks_lines(lacks: list[str], limit: int = 5, names: int = 3) -> list[str]:
    """``summary.input_lacks`` grouped by what is lacking: ``what (clusters a, b)``, at most
    ``names`` clusters or log dirs named per group and ``limit`` groups."""
    groups: dict[tuple[str, str], list[str]] = {}
    for item in lacks:
        m = _LACK.match(one_line(item))
        key, who = ((m.group(1), m.group(3)), m.group(2)) if m else (("", one_line(item)), "")
        groups.setdefault(key, []).append(who)
    out = []
    for (scope, what), whos in groups.items():
        whos = [w for w in whos if w]
        if not whos:
            out.append(what)
        else:
            plural = {"cluster": "clusters", "log dir": "log dirs"}.get(scope, scope)
            more = f" +{len(whos) - names} more" if len(whos) > names else ""
            out.append(f"{what} ({scope if len(whos) == 1 else plural} {', '.join(whos[:names])}{more})")
    if len(out) > limit:
        out = out[:limit] + [f"… {len(out) - limit} more (summary.input_lacks)"]
    return out


def baseline_line(report: Report) -> str:
    """``Since the baseline (as of T): 1 resolved, 0 new, 1 still open``."""
    b = report.baseline
    c = b.counts()
    when = f" (as of {format_time(b.as_of_ms)})" if b.as_of_ms else ""
    return f"Since the baseline{when}: {c['resolved']} resolved, {c['new']} new, {c['still_open']} still open"


def resolved_texts(report: Report) -> list[str]:
    """The baseline's findings this run no longer has, one text each with the age they had."""
    if report.baseline is None:
        return []
    out = []
    for f in report.baseline.resolved:
        age = f", open {format_duration(f['duration_ms'])} then" if f.get("duration_ms") is not None else ""
        producer = f"producer {f['producer_id']}" if f.get("producer_id") is not None else ""
        parts = (one_line(f.get("severity")), f"{one_line(f.get('rule'))}/{one_line(f.get('kind'))}",
                 location(f) or "", producer)
        out.append(" ".join(x for x in parts if x) + age)
    return out


def resolved_lines(report: Report, width: int) -> list[str]:
    """:func:`resolved_texts` under a heading, wrapped."""
    texts = resolved_texts(report)
    if not texts:
        return []
    return ["Resolved since the baseline:"] + [line for t in texts for line in wrap(t, width, INDENT + "resolved ",
                                                                                     INDENT * 3)]


def summary_lines(report: Report) -> list[tuple[str, str]]:
    """The compact summary: (style, text) lines, unwrapped; a text starting with ``\\0`` is an
    item of the list its previous line labels."""
    s = report.summary
    lines: list[tuple[str, str]] = []
    lines.append(("bold", "txn-audit report"))
    lines.append(("findings", _findings_line(report)))
    scope = []
    if s:
        clusters = s.get("clusters") or []
        if len(clusters) == 1:
            scope.append(f"1 cluster ({one_line((clusters[0] or {}).get('cluster_id')) or '?'})")
        elif clusters:
            scope.append(_plural(len(clusters), "cluster"))
        if s.get("brokers"):
            scope.append(_plural(len(s["brokers"]), "broker") + (" (log dirs)" if len(s["brokers"]) > 1 else ""))
        replicas = s.get("replicas", 0)
        scope.append(_plural(s.get("partitions", 0), "partition")
                     + (f" ({_plural(replicas, 'replica')})" if replicas and replicas != s.get("partitions") else ""))
        scope.append(_plural(s.get("batches", 0), "batch", "batches"))
    if scope:
        lines.append(("", ", ".join(scope)))
    tr = s.get("time_range") or {}
    newest = report.as_of_source() == "newest-record" and report.run.get("as_of_ms") == tr.get("last_ms")
    if report.as_of_text() and not newest:
        lines.append(("", report.as_of_text()))
    if report.timeout_text():
        lines.append(("", report.timeout_text()))
    if s:
        tx = s.get("transactions") or {}
        names = {"commit": "committed", "abort": "aborted", "open": "open", "marker-only": "marker-only"}
        text = "Transactions: " + (", ".join(f"{n:,} {names.get(k, k)}" for k, n in tx.items()) or "none")
        seen = ", ".join((s.get("transaction_versions") or {}).get("seen") or [])
        lines.append(("", text + (f" · versions {seen}" if seen else "")))
        if tr.get("first_ms") is not None:
            ages = ", ages as of its end" if newest else ""
            lines.append(("", f"Data {format_time(tr['first_ms'])} … {format_time(tr['last_ms'])}{ages}"))
    if report.baseline is not None:
        lines.append(("bold", baseline_line(report)))
    if report.filters.active:
        lines.append(("", "Filters: " + "; ".join(f"{k}={v}" for k, v in report.filters.describe().items())))
    if report.run.get("skipped"):
        lines.append(("yellow", "Skipped rules: " + "; ".join(f"{k}: {v}" for k, v in report.run["skipped"].items())))
    lacks = input_lacks_lines(s.get("input_lacks") or [])
    if lacks:
        lines.append(("yellow", "Input lacks:" + (" " + lacks[0] if len(lacks) == 1 else "")))
        lines += [("yellow", "\0" + lack) for lack in (lacks if len(lacks) > 1 else [])]
    if not s:
        lines.append(("dim", "Note: this findings directory has no run summary (written without report data)"))
    return lines


def scope_lines(report: Report) -> list[str]:
    """What the summary counts, listed (after the findings) when it is more than one: inputs,
    clusters, brokers (one of each is what the user typed, or is named in the summary). The
    findings directory of ``report DIR`` is what the user typed: not repeated."""
    s = report.summary
    out = []
    if len(s.get("inputs") or []) > 1:
        shown = [one_line(i) for i in s["inputs"][:5]]
        more = f" (+{len(s['inputs']) - 5} more)" if len(s["inputs"]) > 5 else ""
        out.append(f"Inputs: {', '.join(shown)}{more}")
    if len(s.get("clusters") or []) > 1:
        cs = s["clusters"]
        out.append("Clusters: " + ", ".join(one_line((c or {}).get("cluster_id")) or "?" for c in cs[:5])
                   + (f" (+{len(cs) - 5} more)" if len(cs) > 5 else ""))
    if len(s.get("brokers") or []) > 1:
        bs = s["brokers"]
        out.append("Brokers (log dirs): " + ", ".join(f"{one_line(b.get('broker_id')) or '?'}:{one_line(b.get('log_dir')) or '?'}"
                                                      for b in bs[:5]) + (f" (+{len(bs) - 5} more)" if len(bs) > 5 else ""))
    return out


# -- a finding -------------------------------------------------------------------------------------------


def _several_brokers(report: Report) -> bool:
    """Whether a cluster of the report has findings on several brokers / log dirs."""
    brokers: dict = {}
    for f in report.findings:
        for r in f.get("replicas") or [{"broker_id": f.get("broker_id"), "log_dir": f.get("log_dir")}]:
            brokers.setdefault(f.get("cluster_id"), set()).add((r.get("broker_id"), r.get("log_dir")))
    return any(len(v) > 1 for v in brokers.values())


def location(f: dict) -> str | None:
    """``topic-partition@offset`` (the offset the transaction or anomaly starts at)."""
    if f.get("topic") is None:
        return None
    where = f"{one_line(f['topic'])}-{f.get('partition')}"
    return where + (f"@{f['first_offset']}" if f.get("first_offset") is not None else "")


def header_fields(f: dict, cluster: bool = False, broker: bool = False, status: str | None = None) -> list[str]:
    """A finding's header line, field by field (see the module doc); ``status``: new / still-open
    against a baseline."""
    fields = [f"{one_line(f.get('rule'))}/{one_line(f.get('kind'))}" if f.get("kind") else one_line(f.get("rule"))]
    if status:
        fields.append(f"[{status.replace('-', ' ')}]")
    loc = location(f)
    if loc:
        fields.append(loc)
    if f.get("producer_id") is not None:
        epoch = f.get("producer_epoch")
        fields.append(f"producer {f['producer_id']}" + (f"/{epoch}" if epoch is not None else ""))
    if f.get("transactional_id") is not None:
        fields.append(f"txid {one_line(f['transactional_id'])}")
    if f.get("duration_ms") is not None:
        fields.append(f"age {format_duration(f['duration_ms'])}")
    if cluster and f.get("cluster_id"):
        fields.append(f"cluster {one_line(f['cluster_id'])}")
    if broker:
        ids = ",".join(one_line(r.get("broker_id")) for r in f.get("replicas") or []) or one_line(f.get("broker_id"))
        if ids:
            fields.append(f"broker{'s' if ',' in ids else ''} {ids}")
    return fields


def command_lines(command: str, width: int, first: str = INDENT, rest: str = INDENT * 3) -> list[str]:
    """A shell command on lines of at most ``width``: broken only between an option's words
    and the next option (``--topic T`` stays together), each broken line ending in `` \\``
    so the lines pasted together are the command; a word longer than a line stays whole."""
    import shlex

    lex = shlex.shlex(command, posix=False)
    lex.whitespace_split = True
    lex.commenters = ""
    groups: list[str] = []
    for word in lex:
        if groups and not word.startswith("--"):
            groups[-1] += " " + word
        else:
            groups.append(word)
    lines: list[str] = []
    line = first
    for g in groups:
        if line.strip() and len(line) + 1 + len(g) + 2 > max(width, MIN_WIDTH):
            lines.append(line + " \\")
            line = rest + g
        else:
            line += (" " if line.strip() else "") + g
    lines.append(line)
    return lines


def also_text(f: dict) -> str:
    """A further finding of an incident, in one sentence: severity, rule/kind and what its
    message says before its explanation (the part before the first ``: ``)."""
    msg = one_line(f.get("message"))
    head = msg.split(": ", 1)[0] if ": " in msg else msg
    return f"also {one_line(f.get('severity'))} {one_line(f.get('rule'))}/{one_line(f.get('kind'))}: {head}"


def incident_commands(report: Report, incident: Incident) -> list[str]:
    """The commands of an incident, each once, in its findings' order, then the next forensic
    command of its lead. The form for brokers before 3.0 (``applies_to``) is left to the other
    formats: every broker this tool supports takes ``--start-offset``. A command guarded by what
    the ones before it show (an abort after the checks that ask the coordinator,
    :data:`auditor.model.advice.GUARD`) is a shell comment, ``# <condition>: <command>``: pasted
    with the others, it does not run."""
    out: list[str] = []
    for f in incident.findings:
        for c in report.commands(f):
            if c["applies_to"] == LEGACY_FORM:
                continue
            text = f"# {c['applies_to']}: {c['command']}" if c["applies_to"] else c["command"]
            if text not in out:
                out.append(text)
    nxt = report.next_command(incident.lead)
    if nxt:
        out.append(nxt)
    return out


def incident_lines(report: Report, incident: Incident, width: int, *, cluster: bool = False, broker: bool = False,
                   advice: bool = True) -> list[tuple[str, str, bool]]:
    """An incident as (style, text, is_command) lines: its lead finding's header and message, one
    sentence per further finding, the commands wrapped with continuations, the lead's advice."""
    f = incident.lead
    lead = one_line(f.get("severity")).ljust(SEVERITY_WIDTH) + "  "
    out: list[tuple[str, str, bool]] = []
    head = pack(header_fields(f, cluster, broker, report.baseline_status(f)), width - len(lead), " " * len(lead))
    out.append(("header", lead + head[0], False))
    out += [("bold", line, False) for line in head[1:]]
    out += [("", line, False) for line in wrap(one_line(f.get("message")), width, INDENT, INDENT)]
    for other in incident.findings[1:]:
        out += [("dim", line, False) for line in wrap(also_text(other), width, INDENT, INDENT * 2)]
    for cmd in incident_commands(report, incident):
        if cmd.startswith("# "):  # guarded: every line a comment, so no part of it runs when pasted
            out += [("dim", line, True) for line in wrap(one_line(cmd[2:]), width, INDENT + "# ", INDENT + "#   ")]
        else:
            out += [("command", line, True) for line in command_lines(one_line(cmd), width)]
    if advice and f.get("remediation"):
        out += [("dim", line, False) for line in wrap(one_line(f["remediation"]), width, INDENT + "advice: ", INDENT * 2)]
    return out


_STYLES = {"green": "green", "command": "green", "dim": "dim", "bold": "bold", "header": "bold", "yellow": "yellow", "": ""}


def report_lines(report: Report, width: int) -> list[tuple[str, str, bool, str | None]]:
    """The whole report as (style, text, is_command, severity of a header line) lines."""
    lines: list[tuple[str, str, bool, str | None]] = []
    for style, text in summary_lines(report):
        item = text.startswith("\0")  # one item of a list under its label: "- item", continued under it
        first, rest = (INDENT + "- ", INDENT * 2) if item else ("", INDENT)
        lines += [(style, line, False, None) for line in wrap(text.lstrip("\0"), width, first, rest)]
    if not report.findings:
        lines.append(("green", "no findings" + (" match the filters" if report.filters.active else ""), False, None))
    cluster = len(report.cluster_ids()) > 1
    broker = _several_brokers(report)
    advised: set = set()
    for inc in report.incidents():
        f = inc.lead
        key = (f.get("rule"), f.get("kind"), f.get("remediation"))
        lines.append(("", "", False, None))
        for style, text, cmd in incident_lines(report, inc, width, cluster=cluster, broker=broker,
                                               advice=key not in advised):
            lines.append((style, text, cmd, f.get("severity") if style == "header" else None))
        advised.add(key)
    resolved = resolved_lines(report, width)
    if resolved:
        lines.append(("", "", False, None))
        lines += [("green", line, False, None) for line in resolved]
    scope = scope_lines(report)
    if scope and report.findings:
        lines.append(("", "", False, None))
    for text in scope:
        lines += [("dim", line, False, None) for line in wrap(text, width, "", INDENT)]
    return lines


def print_table_report(report: Report, console: Console) -> None:
    """Print the report on ``console`` (results go to stdout; see auditor.report.console)."""
    width = console.width
    for style, text, _cmd, sev in report_lines(report, width):
        if style == "findings":
            t = Text(text.split(":", 1)[0], style="bold")
            if ":" in text:
                t.append(":")
                for i, part in enumerate(text.split(":", 1)[1].split(",")):
                    name = part.strip().split(" ", 1)[-1].split(" (")[0]
                    t.append(("," if i else "") + part, style=SEVERITY_STYLE.get(name, ""))
        elif sev is not None:
            t = Text(text[:SEVERITY_WIDTH], style=SEVERITY_STYLE.get(sev, ""))
            t.append(text[SEVERITY_WIDTH:], style="bold")
        else:
            t = Text(text, style=_STYLES.get(style, style))
        # soft_wrap: lines are laid out already; a command longer than the terminal stays one line
        console.print(t, soft_wrap=True)


def render_table(report: Report, width: int = 200) -> str:
    """The table report as plain text (tests, and writing it to a file)."""
    import io

    buf = io.StringIO()
    print_table_report(report, Console(file=buf, width=width, color_system=None, highlight=False))
    return buf.getvalue()


__all__ = ["COLUMNS", "print_table_report", "render_table", "report_lines", "summary_rows", "command_lines", "incident_commands"]
