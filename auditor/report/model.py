"""The report as data: findings (filtered, ordered), the run summary, plot series.

Every format renders one :class:`Report`, built either from an audit that just
ran (``scan`` / ``audit``) or from a findings directory written earlier
(``report``), so all three commands share formats, filters and exit status.
Loading a findings directory uses pyarrow only: no Spark, no JVM.

Filters apply to findings (files → tables → findings → reports): the findings
directory always holds every finding of the run, and a report shows a subset.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone, timedelta
from pathlib import Path
from typing import Any, Iterable

from auditor.engine.findings import FINDING_COLUMNS
from auditor.engine.messages import format_duration, format_time  # noqa: F401 - the report's, too
from auditor.engine.rule import SEVERITIES, severity_rank

SCHEMA_VERSION = 3  # of the JSON report (docs/report-format.md); bump on incompatible changes
BROKER_PLACEHOLDER = "<broker:port>"


class FindingsDirError(Exception):
    """The path is not a findings directory (``audit --out`` / ``scan --out``) or cannot be read."""


# -- parsing filter values ----------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration(text: str) -> int:
    """``30s``, ``15m``, ``2h``, ``1d``, ``250ms`` or a bare number of milliseconds → ms."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 15m, 2h, 1d, 500ms or milliseconds)")
    value, unit = float(m.group(1)), (m.group(2) or "ms").lower()
    return int(round(value * _UNIT_MS[unit]))


def iso_to_ms(text: str) -> int:
    """An ISO-8601 instant (``2024-05-01T12:00:00Z``, ``2024-05-01T14:00:00+02:00``,
    ``2024-05-01 12:00``, ``2024-05-01``; no offset means UTC) → epoch ms. The one
    parser of instants: ``--since``/``--until``, ``--as-of`` and the timeline's bounds
    use it. ``ValueError`` for anything else."""
    s = str(text).strip()
    try:
        dt = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s)
    except ValueError:
        raise ValueError(f"not an ISO-8601 time: {text!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    # integer arithmetic: float seconds * 1000 can land a millisecond short
    return (dt - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)


def parse_time(text: str) -> int:
    """Epoch milliseconds or an ISO-8601 instant (:func:`iso_to_ms`) → epoch ms."""
    s = str(text).strip()
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    try:
        return iso_to_ms(s)
    except ValueError:
        raise ValueError(f"not a time: {text!r} (use ISO-8601 such as 2024-05-01T12:00:00Z, or epoch ms)") from None


# -- filters --------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    """Which findings a report shows. Empty fields do not filter; repeated values
    of one option are alternatives (any may match), different options all apply."""

    topics: tuple[str, ...] = ()  # globs (fnmatch, case-sensitive)
    partitions: tuple[int, ...] = ()
    producer_ids: tuple[int, ...] = ()
    transactional_id: str | None = None  # regular expression, searched anywhere in the id
    since_ms: int | None = None  # finding's last timestamp (or first) at or after
    until_ms: int | None = None  # finding's first timestamp (or last) at or before
    min_duration_ms: int | None = None
    rules: tuple[str, ...] = ()
    min_severity: str | None = None

    def __post_init__(self) -> None:
        if self.transactional_id is not None:
            re.compile(self.transactional_id)  # fail early with re.error
        if self.min_severity is not None and self.min_severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.min_severity!r}")

    @property
    def active(self) -> bool:
        return bool(self.describe())

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": list(self.topics), "partition": list(self.partitions), "producer_id": list(self.producer_ids),
            "transactional_id": self.transactional_id, "since_ms": self.since_ms, "until_ms": self.until_ms,
            "min_duration_ms": self.min_duration_ms, "rule": list(self.rules), "severity": self.min_severity,
        }

    def describe(self) -> dict[str, Any]:
        """Only the filters in use (for summaries)."""
        return {k: v for k, v in self.as_dict().items() if v not in (None, [])}

    def matches(self, f: dict) -> bool:
        if self.rules and f.get("rule") not in self.rules:
            return False
        if self.min_severity and severity_rank(f["severity"]) < severity_rank(self.min_severity):
            return False
        if self.topics and (f.get("topic") is None or not any(fnmatch.fnmatchcase(f["topic"], g) for g in self.topics)):
            return False
        if self.partitions and f.get("partition") not in self.partitions:
            return False
        if self.producer_ids and f.get("producer_id") not in self.producer_ids:
            return False
        if self.transactional_id is not None and (
                f.get("transactional_id") is None or not re.search(self.transactional_id, f["transactional_id"])):
            return False
        first, last = f.get("first_timestamp"), f.get("last_timestamp")
        if self.since_ms is not None or self.until_ms is not None:
            # a finding spans [first, last]; it is kept when that span overlaps [since, until]
            lo = first if first is not None else last
            hi = last if last is not None else first
            if lo is None:
                return False  # no time at all: cannot be placed inside a time window
            if self.since_ms is not None and max(lo, hi) < self.since_ms:
                return False
            if self.until_ms is not None and min(lo, hi) > self.until_ms:
                return False
        if self.min_duration_ms is not None and (f.get("duration_ms") is None or f["duration_ms"] < self.min_duration_ms):
            return False
        return True

    def apply(self, findings: Iterable[dict]) -> list[dict]:
        return [f for f in findings if self.matches(f)]


# -- findings -------------------------------------------------------------------

FINDING_KEYS = [name for name, _ in FINDING_COLUMNS]


def normalize_finding(f: dict) -> dict:
    """One finding in the report shape: every findings column in table order,
    ``evidence`` a dict with sorted keys and its declared types (the table stores
    strings: :func:`auditor.engine.findings.typed_evidence`), ``replicas`` and
    ``remediation_commands`` lists."""
    from auditor.engine.findings import typed_evidence

    out = {k: f.get(k) for k in FINDING_KEYS}
    ev = typed_evidence(f.get("rule"), f.get("evidence"))
    out["evidence"] = {str(k): ev[k] for k in sorted(ev)}
    out["replicas"] = [dict(r) for r in (f.get("replicas") or [])]
    out["remediation_commands"] = [dict(c) for c in (f.get("remediation_commands") or [])]
    return out


def order_findings(findings: Iterable[dict]) -> list[dict]:
    """Most severe first, then rule, cluster, topic, partition, offset: stable across runs."""
    def key(f: dict) -> tuple:
        return (-severity_rank(f["severity"]), f["rule"], f.get("cluster_id") or "", f.get("topic") or "",
                f.get("partition") if f.get("partition") is not None else -1,
                f.get("first_offset") if f.get("first_offset") is not None else -1,
                f.get("producer_id") if f.get("producer_id") is not None else -1,
                f.get("broker_id") if f.get("broker_id") is not None else -1, f.get("log_dir") or "")
    return sorted(findings, key=key)


def one_line(text: object) -> str:
    """Text on one line: control characters (newlines, escapes) shown escaped (``\\n``,
    ``\\x1b``: :func:`auditor.report.console.safe`), so a value from the dump cannot end a
    comment line, forge the next line of a report or drive the terminal it is printed on."""
    from auditor.report.console import safe

    return "" if text is None else safe(text, markup=False)


_SHELL_SAFE = re.compile(r"[A-Za-z0-9._:/=<>@+-]+")
TABLES_PLACEHOLDER = "<TABLES>"


def shell_arg(value: object) -> str:
    """``value`` as one shell word: as it is when it holds nothing a shell reads, else single-quoted
    (the rule of the remediation commands, :mod:`auditor.engine.messages`)."""
    import shlex

    text = str(value)
    return text if _SHELL_SAFE.fullmatch(text) else shlex.quote(text)


def timeline_command(f: dict, tables: str | None = None, cluster: bool = False) -> str | None:
    """The next forensic command for finding ``f``: ``txn-audit timeline TABLES --topic T
    --partition N --from OFFSET [--producer-id P] [--cluster CLUSTER_ID]``; ``TABLES`` is the
    literal ``<TABLES>`` when not known, ``--cluster`` only with ``cluster`` (the report spans
    several clusters). ``None`` for a finding without a topic-partition.

    ``OFFSET`` is the first the finding cites: for a late write, its session's marker before the
    data (``previous_marker_offset``), so the replay sees that marker and marks the write late --
    started at the data, it would not know of the marker; else the finding's first offset."""
    if f.get("topic") is None or f.get("partition") is None:
        return None
    parts = ["txn-audit", "timeline", shell_arg(tables) if tables else TABLES_PLACEHOLDER,
             "--topic", shell_arg(f["topic"]), "--partition", str(f["partition"])]
    start = f.get("first_offset")
    cited = (f.get("evidence") or {}).get("previous_marker_offset")
    if f.get("kind") == "late-write" and cited not in (None, ""):
        start = cited
    if start is not None:
        parts += ["--from", str(start)]
    if f.get("producer_id") is not None:
        parts += ["--producer-id", str(f["producer_id"])]
    if cluster and f.get("cluster_id"):
        parts += ["--cluster", shell_arg(f["cluster_id"])]
    return " ".join(parts)


def coordinator_epoch(f: dict) -> str | None:
    """The coordinator epoch a finding names (evidence), as find-hanging prints it."""
    v = (f.get("evidence") or {}).get("coordinator_epoch")
    return None if v in (None, "") else str(v)


# -- incidents ------------------------------------------------------------------
#
# One problem often gives several findings: a hanging transaction and the last stable offset it
# pins are reported by two rules (``hanging-transaction``, ``stuck-lso``) about the same open
# transaction. The report shows them as one incident -- one block, one set of commands -- and the
# JSON links them by ``incident``. Findings are one incident when they name the same transaction:
# cluster, topic-partition, producer id and epoch, and first offset (stuck-lso's first offset is
# the pinning transaction's). Any other finding is an incident of its own.


def incident_key(f: dict) -> tuple:
    """What makes findings one incident (see above); a finding naming no transaction keys alone."""
    if f.get("topic") is None or f.get("producer_id") is None or f.get("first_offset") is None:
        return ("finding", f.get("rule"), f.get("kind"), f.get("cluster_id"), f.get("topic"), f.get("partition"),
                f.get("producer_id"), f.get("first_offset"), f.get("broker_id"), f.get("log_dir"))
    return ("transaction", f.get("cluster_id"), f["topic"], f.get("partition"), f["producer_id"],
            f.get("producer_epoch"), f["first_offset"])


def incident_id(f: dict) -> str:
    """A short id of ``f``'s incident, the same in every run that finds it (a hash of its key)."""
    import hashlib

    return "i-" + hashlib.sha1(json.dumps(incident_key(f), default=str).encode()).hexdigest()[:10]


@dataclass
class Incident:
    """Findings about one problem, worst first (:func:`group_incidents`)."""

    id: str
    findings: list[dict]

    @property
    def lead(self) -> dict:
        """The finding the incident is reported under: its most severe."""
        return self.findings[0]

    @property
    def severity(self) -> str:
        return self.lead["severity"]


def group_incidents(findings: list[dict]) -> list[Incident]:
    """``findings`` (ordered, :func:`order_findings`) as incidents, in the order of each one's lead."""
    groups: dict[str, Incident] = {}
    for f in findings:
        key = incident_id(f)
        if key in groups:
            groups[key].findings.append(f)
        else:
            groups[key] = Incident(key, [f])
    return list(groups.values())


# -- the report -----------------------------------------------------------------


@dataclass
class Report:
    """Everything a renderer needs; renderers never touch Spark or files."""

    findings: list[dict]  # filtered and ordered
    total_findings: int  # before filters
    summary: dict = field(default_factory=dict)  # audit-time summary (report_data.build_summary); {} if absent
    plots: dict = field(default_factory=dict)  # audit-time plot series (report_data.build_plots); {} if absent
    run: dict = field(default_factory=dict)  # run_id, as_of_ms, skipped, rule_seconds, source
    filters: Filters = field(default_factory=Filters)
    bootstrap_server: str | None = None
    baseline: Any = None  # auditor.report.baseline.Baseline when --baseline was given (compare())

    @property
    def inputs(self) -> list[str]:
        return list(self.summary.get("inputs") or [])

    def by_severity(self) -> dict[str, int]:
        counts = {s: 0 for s in reversed(SEVERITIES)}
        for f in self.findings:
            counts[f["severity"]] = counts.get(f["severity"], 0) + 1
        return counts

    def as_of_source(self) -> str | None:
        """Where the reference instant of every age comes from: ``given`` (``--as-of``) or
        ``newest-record`` (the newest batch or coordinator record of each cluster's input: an
        offline copy has no "now", and the wall clock would age every transaction open when the
        copy was taken); None when the run did not say (a findings directory of an older version)."""
        given = self.run.get("as_of_given")
        return None if given is None or not self.run.get("as_of_ms") else ("given" if given else "newest-record")

    def as_of_text(self) -> str | None:
        """The reference instant and its source, as the report headers say it."""
        ms = self.run.get("as_of_ms")
        if not ms:
            return None
        source = {"given": "given with --as-of",
                  "newest-record": "the newest record read; --as-of now for the present"}.get(self.as_of_source())
        return f"Ages as of {format_time(ms)}" + (f" ({source})" if source else "")

    def timeout_text(self) -> str | None:
        """The transaction.max.timeout.ms the verdicts assumed and where it came from, as the
        report headers say it (None: a findings directory of an older version does not say). A
        transaction's own timeout, where its coordinator record gives one, is capped by it."""
        ms = self.run.get("max_timeout_ms")
        if ms is None:
            return None
        source = "--max-timeout-ms" if self.run.get("max_timeout_given") else "Kafka's default, assumed"
        return f"Timeouts: transaction.max.timeout.ms {format_duration(ms)} ({source})"

    def incidents_by_severity(self) -> dict[str, int]:
        counts = {s: 0 for s in reversed(SEVERITIES)}
        for inc in self.incidents():
            counts[inc.severity] = counts.get(inc.severity, 0) + 1
        return counts

    def incidents(self) -> list[Incident]:
        """The findings as incidents (:func:`group_incidents`), worst first."""
        return group_incidents(self.findings)

    def by_rule(self) -> dict[str, list[dict]]:
        """Findings grouped by rule, rules ordered by their most severe finding."""
        groups: dict[str, list[dict]] = {}
        for f in self.findings:  # already ordered most severe first
            groups.setdefault(f["rule"], []).append(f)
        return groups

    def commands(self, f: dict) -> list[dict[str, str | None]]:
        """The finding's paste-ready commands, ``<broker:port>`` replaced by ``--bootstrap-server`` if given."""
        out = []
        for c in f.get("remediation_commands") or []:
            cmd = c["command"]
            if self.bootstrap_server:
                cmd = cmd.replace(BROKER_PLACEHOLDER, self.bootstrap_server)
            out.append({"command": cmd, "applies_to": c.get("applies_to")})
        return out

    def cluster_ids(self) -> set:
        """The clusters of the report: the run summary's and the findings'."""
        ids = {(c or {}).get("cluster_id") for c in self.summary.get("clusters") or []}
        ids |= {f.get("cluster_id") for f in self.findings}
        return {c for c in ids if c}

    def next_command(self, f: dict) -> str | None:
        """The forensic command to run next on finding ``f`` (:func:`timeline_command`): over
        ``run["tables"]`` when the run knows its tables, with ``--cluster`` when the report spans
        several clusters."""
        return timeline_command(f, self.run.get("tables"), cluster=len(self.cluster_ids()) > 1)

    def finding_json(self, f: dict) -> dict:
        """A finding as the JSON formats write it (docs/report-format.md)."""
        out = dict(f)
        out["remediation_commands"] = self.commands(f)
        out["incident"] = incident_id(f)
        if self.baseline is not None:
            out["baseline"] = self.baseline.status.get(id(f))
        return out

    def baseline_status(self, f: dict) -> str | None:
        """``new`` / ``still-open`` against the baseline (None without one)."""
        return None if self.baseline is None else self.baseline.status.get(id(f))

    def summary_json(self) -> dict:
        s = {k: v for k, v in self.summary.items() if k != "inputs"}
        s.update({
            "findings": len(self.findings),
            "findings_before_filters": self.total_findings,
            "by_severity": self.by_severity(),
            "by_rule": {r: len(fs) for r, fs in sorted(self.by_rule().items())},
            "filters": self.filters.describe(),
            "run_id": self.run.get("run_id"),
            "as_of_ms": self.run.get("as_of_ms"),
            "as_of_source": self.as_of_source(),
            "max_timeout_ms": self.run.get("max_timeout_ms"),
            "max_timeout_source": (None if self.run.get("max_timeout_ms") is None
                                   else "given" if self.run.get("max_timeout_given") else "kafka-default"),
            "incidents": self.incidents_by_severity(),
            "skipped_rules": self.run.get("skipped") or {},
        })
        if self.baseline is not None:
            s["baseline"] = self.baseline.summary_json()
        return s

    def affected_plots(self) -> list[dict]:
        """Plot series of the partitions that still have findings after filtering."""
        keys = {(f.get("cluster_id"), f.get("topic"), f.get("partition")) for f in self.findings}
        return [p for p in self.plots.get("partitions", []) if (p.get("cluster_id"), p.get("topic"), p.get("partition")) in keys]


def build_report(findings: Iterable[dict], *, summary: dict | None = None, plots: dict | None = None,
                 run: dict | None = None, filters: Filters | None = None,
                 bootstrap_server: str | None = None) -> Report:
    filters = filters or Filters()
    allf = [normalize_finding(f) for f in findings]
    shown = order_findings(filters.apply(allf))
    return Report(findings=shown, total_findings=len(allf), summary=summary or {}, plots=plots or {},
                  run=run or {}, filters=filters, bootstrap_server=bootstrap_server)


def from_audit(result, filters: Filters | None = None, bootstrap_server: str | None = None,
               source: str | None = None) -> Report:
    """A report of an :class:`~auditor.engine.runner.AuditResult` (``scan`` / ``audit``)."""
    run = {"run_id": getattr(result, "run_id", None), "as_of_ms": result.as_of_ms,
           "as_of_given": getattr(result, "as_of_given", False), "skipped": dict(result.skipped),
           "max_timeout_ms": getattr(result, "max_timeout_ms", None),
           "max_timeout_given": getattr(result, "max_timeout_given", None),
           "rule_seconds": dict(result.rule_seconds), "source": source}
    return build_report(result.findings, summary=result.summary, plots=result.plots, run=run, filters=filters,
                        bootstrap_server=bootstrap_server)


def load_findings_dir(path: str | Path) -> tuple[list[dict], dict, dict]:
    """``(findings, manifest, plots)`` of a findings directory, read with pyarrow.

    Raises :class:`FindingsDirError` when ``path`` is not one (no ``_audit.json``
    or no Parquet part) or cannot be read.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = Path(path)
    if not p.is_dir():
        raise FindingsDirError(f"{p}: not a directory (expected the directory written by `audit --out` / `scan --out`)")
    manifest_path = p / "_audit.json"
    parts = sorted(p.glob("part-*.parquet"))
    if not manifest_path.is_file() or not parts:
        raise FindingsDirError(f"{p}: not a findings directory (no _audit.json and part-*.parquet; "
                               "write one with `txn-audit audit TABLES --out DIR` or `txn-audit scan LOGDIR --out DIR`)")
    try:
        manifest = json.loads(manifest_path.read_text())
        if not isinstance(manifest, dict):
            raise ValueError("_audit.json is not a JSON object")
        tables = [pq.read_table(f) for f in parts]
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        missing = [c for c in ("rule", "severity", "message") if c not in table.column_names]
        if missing:
            raise ValueError(f"findings table lacks column(s) {', '.join(missing)}")
        rows = table.to_pylist()
        plots_path = p / "_plots.json"
        plots = json.loads(plots_path.read_text()) if plots_path.is_file() else {}
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise FindingsDirError(f"{p}: cannot read findings: {exc}") from None
    return rows, manifest, plots


def load_report(path: str | Path, filters: Filters | None = None, bootstrap_server: str | None = None) -> Report:
    """The report of a findings directory: its findings with today's text of their kinds
    (:func:`auditor.engine.messages.render_stored`), its run's manifest and plots."""
    from auditor.engine.messages import render_stored

    rows, manifest, plots = load_findings_dir(path)
    rows = [render_stored(normalize_finding(r)) for r in rows]
    run = {k: manifest.get(k) for k in ("run_id", "as_of_ms", "as_of_given", "max_timeout_ms", "max_timeout_given",
                                         "skipped", "rule_seconds", "tables")}
    run["source"] = str(Path(path).absolute())
    return build_report(rows, summary=manifest.get("summary") or {}, plots=plots, run=run, filters=filters,
                        bootstrap_server=bootstrap_server)


def fails(findings: Iterable[dict], fail_on: str) -> bool:
    """True when a finding reaches ``fail_on`` (exit status 1)."""
    return any(severity_rank(f["severity"]) >= severity_rank(fail_on) for f in findings)
