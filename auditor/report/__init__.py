"""Reports of audit findings: one data model (:mod:`auditor.report.model`), one
small renderer per format (table, json/jsonl, markdown, html) and the inline
SVG plots of the HTML report. Nothing here needs Spark: ``txn-audit report``
renders a findings directory with pyarrow alone.
"""

from auditor.report.model import Filters, FindingsDirError, Report, build_report, from_audit, load_report

FORMATS = ("table", "json", "jsonl", "markdown", "html")


def render(report: Report, fmt: str) -> str:
    """The report as text in ``fmt`` (the ``table`` format needs a console: see render_table)."""
    if fmt == "json":
        from auditor.report.render_json import render_json

        return render_json(report)
    if fmt == "jsonl":
        from auditor.report.render_json import render_jsonl

        return render_jsonl(report)
    if fmt == "markdown":
        from auditor.report.render_markdown import render_markdown

        return render_markdown(report)
    if fmt == "html":
        from auditor.report.render_html import render_html

        return render_html(report)
    raise ValueError(f"unknown format {fmt!r}")


__all__ = ["FORMATS", "Filters", "FindingsDirError", "Report", "build_report", "from_audit", "load_report", "render"]
