"""``--baseline PREV``: what changed since an earlier report -- the loop that verifies a fix.

After the abort a finding advised, the operator scans again with the earlier report as the
baseline; the report then says of every finding whether it is *new* or *still open*, and lists
the baseline's findings that are gone (*resolved*), with the age each had.

A finding is the same finding in both runs when it names the same subject: its rule and its
incident key (:func:`auditor.report.model.incident_key`: cluster, topic-partition, producer id
and epoch, first offset of the transaction). The kind is left out for transaction findings: an
open transaction first seen ``hanging`` and then ``late-write`` is still the one problem.

The baseline is a JSON report (``--format json``, or ``jsonl``) or a findings directory
(``scan --out`` / ``audit --out``); the report's filters apply to it too, so a filtered
re-scan compares like with like. Nothing here needs Spark.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from auditor.report.model import (FindingsDirError, Report, incident_key, load_findings_dir, normalize_finding,
                                  order_findings)

NEW, STILL_OPEN = "new", "still-open"


class BaselineError(Exception):
    """The baseline cannot be read (path, and why)."""


def finding_identity(f: dict) -> tuple:
    """What makes a finding of one run the same as one of another (see the module docstring)."""
    return (f.get("rule"), *incident_key(f))


@dataclass
class Baseline:
    """An earlier run's findings, compared with a report's (:func:`compare`)."""

    source: str
    as_of_ms: int | None
    findings: list[dict]
    status: dict[int, str] = field(default_factory=dict)  # id(finding of the report) -> NEW / STILL_OPEN
    resolved: list[dict] = field(default_factory=list)  # the baseline's findings the report no longer has

    def counts(self) -> dict[str, int]:
        values = list(self.status.values())
        return {"new": values.count(NEW), "still_open": values.count(STILL_OPEN), "resolved": len(self.resolved)}

    def summary_json(self) -> dict:
        return {"source": self.source, "as_of_ms": self.as_of_ms, **self.counts()}


def load_baseline(path: str | Path) -> Baseline:
    """The findings of a JSON / JSON-lines report or of a findings directory (:func:`compare`
    filters them like the report). :class:`BaselineError` when ``path`` is none of those."""
    p = Path(path)
    if p.is_dir():
        try:
            rows, manifest, _plots = load_findings_dir(p)
        except FindingsDirError as exc:
            raise BaselineError(str(exc)) from None
        as_of = manifest.get("as_of_ms")
    else:
        rows, as_of = _report_file(p)
    found = [normalize_finding(f) for f in rows]
    return Baseline(str(p.absolute()), as_of, found)


def _report_file(p: Path) -> tuple[list[dict], int | None]:
    """(findings, as_of_ms) of a ``--format json`` or ``jsonl`` report file."""
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{p}: cannot read the baseline: {exc}") from None
    try:
        doc = json.loads(text)
        if isinstance(doc, dict) and isinstance(doc.get("findings"), list):
            return doc["findings"], (doc.get("summary") or {}).get("as_of_ms")
        raise ValueError("a JSON object without a findings list")
    except ValueError as exc:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise BaselineError(f"{p}: not a txn-audit report (JSON: {exc}; JSON lines: line {n} is not JSON); "
                                    "give a `--format json` report or a findings directory (`--out`)") from None
            if not isinstance(row, dict) or "rule" not in row:
                raise BaselineError(f"{p}: line {n} is not a finding of a `--format jsonl` report")
            rows.append(row)
        return rows, None


def compare(report: Report, baseline: Baseline) -> Baseline:
    """Mark each of ``report``'s findings new or still open against ``baseline`` and list the
    baseline's findings it no longer has; sets ``report.baseline`` and returns it."""
    baseline.findings = order_findings(report.filters.apply(baseline.findings))
    before = {finding_identity(f) for f in baseline.findings}
    now = {finding_identity(f) for f in report.findings}
    baseline.status = {id(f): STILL_OPEN if finding_identity(f) in before else NEW for f in report.findings}
    baseline.resolved = [f for f in baseline.findings if finding_identity(f) not in now]
    report.baseline = baseline
    return baseline


def exit_status(report: Report, fail_on: str) -> int:
    """With a baseline: 0 when no finding at or above ``fail_on`` remains, 1 when one of them is
    new, 3 when only findings the baseline had remain (the fix has not taken yet)."""
    from auditor.engine.rule import severity_rank

    at = [f for f in report.findings if severity_rank(f["severity"]) >= severity_rank(fail_on)]
    if not at:
        return 0
    status = report.baseline.status if report.baseline else {}
    return 1 if any(status.get(id(f)) != STILL_OPEN for f in at) else 3
