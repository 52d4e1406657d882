"""``--format json`` and ``jsonl``: the machine-readable reports.

The shape is documented in docs/report-format.md and versioned by
``schema_version``: tools that file tickets or page people parse it, so keys
are only ever added within a version. Keys are written in a fixed order and
findings in a fixed order, so two reports of the same run diff cleanly.
"""

from __future__ import annotations

import json

from auditor import __version__
from auditor.report.model import SCHEMA_VERSION, Report, incident_id


def report_dict(report: Report) -> dict:
    """The JSON report as a dict (``render_json`` serialises it); with ``--baseline``, the
    baseline's findings this run no longer has under ``resolved``."""
    out = {
        "schema_version": SCHEMA_VERSION,
        "generated_by": f"txn-audit {__version__}",
        "findings": [report.finding_json(f) for f in report.findings],
        "summary": report.summary_json(),
        "inputs": report.inputs,
        # where the audited tables are (scan keeps them): the forensic commands read them
        "tables": report.run.get("tables"),
    }
    if report.baseline is not None:
        out["resolved"] = [{**f, "incident": incident_id(f)} for f in report.baseline.resolved]
    return out


def render_json(report: Report) -> str:
    return json.dumps(report_dict(report), indent=2, default=str) + "\n"


def render_jsonl(report: Report) -> str:
    """One finding per line (the object of ``findings`` in the JSON report, led by the report's
    ``schema_version`` so that each line stands alone), no summary: for ``grep``, ``jq -c`` and
    log shippers."""
    return "".join(json.dumps({"schema_version": SCHEMA_VERSION, **report.finding_json(f)}, default=str) + "\n"
                   for f in report.findings)
