"""The audit's results as Prometheus metrics: ``scan --metrics FILE`` and ``batch --metrics FILE``.

Why: a platform team alerts through Prometheus, and a scheduled job's results reach it as a
file that node_exporter's textfile collector reads (or that is pushed to a Pushgateway). The
glue has hard parts, done here once (docs/operations.md, "Metrics and alerts (Prometheus)"):

* **One registry of names and labels** (:data:`METRICS`). The writer refuses a series whose
  labels are not its metric's (:func:`sample`), and tests/test_metrics.py holds the registry
  equal to the table in docs/operations.md: a name cannot change between runs or releases
  without the documentation, and the alert rules built on it, saying so.
* **Atomic replacement** (:func:`write_atomically`): a temporary file in the same directory,
  then ``rename``. The collector reads the old file or the new one, never half of one; the
  temporary name does not end in ``.prom``, so the collector never reads it.
* **A failed run keeps the last good values** (:func:`failure_text`): the series a failed run
  cannot know (findings, ages, lags, the last success) are read back from the file it replaces
  and written again, beside its own ``txn_audit_run_success 0``. A finding never disappears
  from Prometheus because an audit could not run, so its alert does not resolve by mistake.
* **Stable, bounded series.** Every (rule, kind) of the catalog is written for every cluster
  the audit read, 0 when nothing is open: a series does not come and go with its findings.
  Per-partition series exist only for partitions with an open finding of severity error or
  critical, at most :data:`MAX_PARTITIONS` per metric (the largest values); the rest of a
  cluster's partitions are one roll-up series, ``topic="other", partition="other"``, holding
  their largest value (a Kafka partition label is a number, so it cannot clash).

Findings are read as the engine produced them (severity, kind, ``duration_ms``, the
``stuck-lso`` evidence): nothing here re-derives a verdict.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from auditor.engine.findings import typed_evidence
from auditor.engine.rule import Rule, severity_rank
from auditor.errors import OutputError

PARTITION = ("cluster", "topic", "partition")


@dataclass(frozen=True)
class Metric:
    """One metric of the file: a gauge (the file is a snapshot of state, so every metric is one;
    Prometheus's ``_total`` suffix is for counters and appears nowhere). ``kept``: a failed run
    writes the last successful run's series again instead of its own."""

    name: str
    labels: tuple[str, ...]
    kept: bool
    help: str


OPEN_FINDINGS = Metric("txn_audit_open_findings", ("cluster", "rule", "kind", "severity"), True,
                       "Open findings by cluster, rule, kind (the rule's verdict) and severity; 0 for every "
                       "kind of the catalog with none open in a cluster the audit read.")
HANGING_AGE = Metric("txn_audit_hanging_transaction_age_seconds", PARTITION, True,
                     "Age of the partition's oldest open hanging transaction (a hanging-transaction finding of "
                     "severity error or critical): its duration_ms, in seconds.")
LSO_LAG_OFFSETS = Metric("txn_audit_lso_lag_offsets", PARTITION, True,
                         "Offsets between the stuck LSO and the high watermark (the largest lag_offsets of the "
                         "partition's stuck-lso findings of severity error or critical).")
LSO_LAG_SECONDS = Metric("txn_audit_lso_lag_seconds", PARTITION, True,
                            "How long the stuck LSO has been pinned: the age of its pinning transaction as of the "
                            "audit's reference instant (the largest duration_ms of the partition's stuck-lso findings "
                            "of severity error or critical, the hanging-transaction verdict's age), in seconds.")
MAX_TIMEOUT = Metric("txn_audit_transaction_max_timeout_seconds", (), True,
                     "The transaction.max.timeout.ms the audit judged ages against (--max-timeout-ms), in seconds.")
FILES_DECODED = Metric("txn_audit_files_decoded", (), True,
                       "Files the last successful run decoded (batch: new or changed since its previous run; "
                       "scan: every input file, 0 when it reused its kept tables).")
LAST_SUCCESS = Metric("txn_audit_last_success_timestamp_seconds", (), True,
                      "When the last successful run ended (Unix time, seconds).")
RUN_TIMESTAMP = Metric("txn_audit_run_timestamp_seconds", (), False,
                       "When the last run ended, successful or not (Unix time, seconds).")
RUN_DURATION = Metric("txn_audit_run_duration_seconds", (), False, "How long the last run took, in seconds.")
RUN_SUCCESS = Metric("txn_audit_run_success", (), False,
                     "1 when the last run succeeded; 0 when it failed, its other series then being the last "
                     "successful run's.")

#: every metric the file can hold, in the order it holds them (the run first, the long zero-filled list last)
METRICS: tuple[Metric, ...] = (RUN_SUCCESS, RUN_TIMESTAMP, RUN_DURATION, LAST_SUCCESS, FILES_DECODED, MAX_TIMEOUT,
                               HANGING_AGE, LSO_LAG_OFFSETS, LSO_LAG_SECONDS, OPEN_FINDINGS)
#: per-partition series of one metric, at most (the rest: one roll-up series per cluster)
MAX_PARTITIONS = 100
ROLL_UP = "other"
#: a finding that needs action: "open hanging transaction", "stuck LSO" (the rest is normal state or unsettled)
ACTION_SEVERITY = "error"

Sample = tuple[Metric, tuple[str, ...], float]  # metric, label values in its declared order, value


def sample(metric: Metric, value: float, **labels: object) -> Sample:
    """A series of ``metric``: refuses labels other than the registry's, so the file can only hold
    what docs/operations.md documents. None becomes the empty label value."""
    if set(labels) != set(metric.labels):
        raise ValueError(f"{metric.name}: labels {sorted(labels)}, the registry says {list(metric.labels)}")
    return metric, tuple("" if labels[k] is None else str(labels[k]) for k in metric.labels), value


# -- the series of a successful run ----------------------------------------------------------------


def open_findings(findings: Iterable[dict], clusters: Iterable[str | None], rules: Iterable[Rule]) -> list[Sample]:
    """:data:`OPEN_FINDINGS`: a count per (cluster, rule, kind, severity) of ``findings``, and 0 for
    every kind of ``rules`` in every cluster of ``clusters`` that has none (the kind's severity is
    the catalog's, as on the findings). A finding of a kind the catalog no longer has (an older
    release's, in the batch history) is counted under its own labels."""
    rules = list(rules)
    counts: dict[tuple, int] = {}
    for f in findings:
        key = (f.get("cluster_id") or "", f["rule"], f.get("kind") or "", f["severity"])
        counts[key] = counts.get(key, 0) + 1
    every = {c or "" for c in clusters} | {k[0] for k in counts}
    for c in every:
        for rule in rules:
            for name, kind in rule.kinds.items():
                counts.setdefault((c, rule.id, name, kind.severity), 0)
    return [sample(OPEN_FINDINGS, n, cluster=c, rule=r, kind=k, severity=s) for (c, r, k, s), n in counts.items()]


def _needs_action(f: dict) -> bool:
    return severity_rank(f["severity"]) >= severity_rank(ACTION_SEVERITY)


def worst_per_partition(findings: Iterable[dict], rule: str, value: Callable[[dict], float | None]) -> dict:
    """``{(cluster, topic, partition): largest value}`` over ``rule``'s findings that need action
    (severity error or critical), ``value`` reading each finding's figure (None: no figure)."""
    out: dict[tuple[str, str, str], float] = {}
    for f in findings:
        if f["rule"] != rule or not _needs_action(f) or f.get("topic") is None or f.get("partition") is None:
            continue
        v = value(f)
        if v is None:
            continue
        key = (f.get("cluster_id") or "", f["topic"], str(f["partition"]))
        out[key] = max(out.get(key, v), v)
    return out


def capped(metric: Metric, worst: dict, limit: int = MAX_PARTITIONS) -> list[Sample]:
    """The ``limit`` partitions of ``worst`` with the largest values as series of their own; the
    others of each cluster as one roll-up series (``topic`` and ``partition`` ``other``) holding
    their largest value. Bounds the file at ``limit`` + clusters series per metric."""
    ranked = sorted(worst.items(), key=lambda kv: (-kv[1], kv[0]))
    out = [sample(metric, v, cluster=c, topic=t, partition=p) for (c, t, p), v in ranked[:limit]]
    rolled: dict[str, float] = {}
    for (c, _t, _p), v in ranked[limit:]:
        rolled[c] = max(rolled.get(c, v), v)
    return out + [sample(metric, v, cluster=c, topic=ROLL_UP, partition=ROLL_UP) for c, v in rolled.items()]


def _seconds(ms: object) -> float | None:
    return None if ms is None else int(ms) / 1000


def _evidence(f: dict, name: str) -> object:
    return typed_evidence(f["rule"], f.get("evidence")).get(name)


def partition_series(findings: list[dict], limit: int = MAX_PARTITIONS) -> list[Sample]:
    """The per-partition metrics: the oldest open hanging transaction, and the stuck LSO's lag in offsets
    and how long it has been pinned (its finding's ``duration_ms``, the verdict's age: the span of data
    behind it, ``lag_ms``, is 0 when the pin's own batches are the newest, however old they are)."""
    return [
        *capped(HANGING_AGE, worst_per_partition(findings, "hanging-transaction",
                                                 lambda f: _seconds(f.get("duration_ms"))), limit),
        *capped(LSO_LAG_OFFSETS, worst_per_partition(findings, "stuck-lso", lambda f: _evidence(f, "lag_offsets")),
                limit),
        *capped(LSO_LAG_SECONDS, worst_per_partition(findings, "stuck-lso",
                                                        lambda f: _seconds(f.get("duration_ms"))), limit),
    ]


def run_series(success: bool, ended_s: float, duration_s: float) -> list[Sample]:
    """The last run's own series (never kept by a failed run: they are its own)."""
    return [sample(RUN_TIMESTAMP, round(ended_s, 3)), sample(RUN_DURATION, round(duration_s, 3)),
            sample(RUN_SUCCESS, 1 if success else 0)]


@dataclass
class Outcome:
    """What a successful run tells: the open findings as the engine produced them (scan: every
    finding of the audit; batch: the findings table's open rows), the clusters it read, the rules
    whose kinds are written even with nothing open, and its figures."""

    findings: list[dict]
    clusters: Iterable[str | None]
    rules: Iterable[Rule]
    files_decoded: int
    max_timeout_ms: int


def success_text(outcome: Outcome, ended_s: float, duration_s: float, limit: int = MAX_PARTITIONS) -> str:
    """The file of a successful run."""
    return render([
        *open_findings(outcome.findings, outcome.clusters, outcome.rules),
        *partition_series(outcome.findings, limit),
        sample(MAX_TIMEOUT, outcome.max_timeout_ms / 1000),
        sample(FILES_DECODED, outcome.files_decoded),
        sample(LAST_SUCCESS, round(ended_s, 3)),
        *run_series(True, ended_s, duration_s),
    ])


# -- the text --------------------------------------------------------------------------------------


def _escape(value: str, quote: bool = True) -> str:
    """A label value (``quote``) or a HELP text as the text format escapes them."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n")
    return out.replace('"', '\\"') if quote else out


def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def series_line(s: Sample) -> str:
    metric, values, v = s
    labels = ",".join(f'{k}="{_escape(x)}"' for k, x in zip(metric.labels, values))
    return f"{metric.name}{{{labels}}} {_number(v)}" if labels else f"{metric.name} {_number(v)}"


def render(samples: Iterable[Sample], kept: dict[str, list[str]] | None = None) -> str:
    """Prometheus's text exposition format (0.0.4, what node_exporter's textfile collector and the
    Pushgateway read): each metric of :data:`METRICS` with its ``# HELP`` and ``# TYPE gauge``
    lines and its series sorted, from ``samples`` or, for a metric with none, the lines ``kept``
    from a previous file."""
    lines: dict[str, list[str]] = {}
    for s in samples:
        lines.setdefault(s[0].name, []).append(series_line(s))
    out = []
    for m in METRICS:
        body = sorted(lines.get(m.name) or (kept or {}).get(m.name) or [])
        if body:
            out += [f"# HELP {m.name} {_escape(m.help, quote=False)}", f"# TYPE {m.name} gauge", *body]
    return "\n".join(out) + "\n"


# one series line: name, optional {labels} (quoted values may hold '}' and escapes), value
_SERIES = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+\S+\s*$')


def kept_series(previous: str) -> dict[str, list[str]]:
    """The series lines of the ``kept`` metrics in a previous file, as they were written (a file
    of another release, or hand-edited, keeps whichever of its lines are such series)."""
    keep = {m.name for m in METRICS if m.kept}
    out: dict[str, list[str]] = {}
    for line in previous.splitlines():
        m = _SERIES.match(line.strip())
        if m and m.group(1) in keep:
            out.setdefault(m.group(1), []).append(line.strip())
    return out


def failure_text(previous: str | None, ended_s: float, duration_s: float) -> str:
    """The file of a failed run: its own run series (``txn_audit_run_success 0``) and the last
    successful run's others, read from ``previous`` (the file it replaces; None: there is none)."""
    return render(run_series(False, ended_s, duration_s), kept_series(previous or ""))


# -- the file --------------------------------------------------------------------------------------


def check_writable(path: str) -> None:
    """Raise :class:`OutputError` now (before the audit runs) when ``path`` cannot be replaced:
    it is a directory, or its directory does not exist or is not writable."""
    target = Path(path).absolute()
    if target.is_dir():
        raise OutputError(target, "it is a directory (--metrics names a file, e.g. DIR/txn_audit.prom)")
    if not target.parent.is_dir():
        raise OutputError(target, f"{target.parent} is not a directory")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise OutputError(target, f"no permission to write in {target.parent} (the file is replaced by a rename)")


def write_atomically(path: str, text: str) -> None:
    """Replace ``path`` by ``text`` in one ``rename``: written to a temporary file of the same
    directory (same file system: the rename is atomic), flushed to disk, made readable by the
    collector's user (0644), then renamed over ``path``."""
    target = Path(path).absolute()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise OutputError(target, exc.strerror or str(exc)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(target, exc.strerror or str(exc)) from None


def _previous(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


class MetricsRun:
    """One command's run as its metrics file tells it. The command calls :meth:`succeeded` once
    its results are complete, or :meth:`skipped` when another run will tell (the batch job's busy
    warehouse); :func:`recording` writes the failure file when it called neither."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.started = time.monotonic()
        self.done = False

    def succeeded(self, outcome: Outcome, limit: int = MAX_PARTITIONS) -> None:
        if self.path:
            write_atomically(self.path, success_text(outcome, time.time(), time.monotonic() - self.started, limit))
        self.done = True

    def skipped(self) -> None:
        self.done = True

    def failed(self) -> None:
        if self.path:
            text = failure_text(_previous(self.path), time.time(), time.monotonic() - self.started)
            write_atomically(self.path, text)
        self.done = True


@contextmanager
def recording(path: str | None) -> Iterator[MetricsRun]:
    """The run of a command with ``--metrics path`` (None: no file). ``path`` is checked first;
    a run that ends without :meth:`MetricsRun.succeeded` (an error, an exception, an interrupt)
    writes the failure file. If that write fails too, one line says so and the run's own error
    stays the one reported."""
    if path:
        check_writable(path)
    run = MetricsRun(path)
    try:
        yield run
    finally:
        if not run.done:
            try:
                run.failed()
            except OutputError as exc:
                sys.stderr.write(f"txn-audit: the failure could not be recorded in the metrics file: {exc}\n")
