"""Run the rule catalog over ingested tables and write the findings table.

Rules build their queries over shared views (:mod:`auditor.engine.views`); each rule's
findings are conformed to one schema, collected (for a small dump, each rule's
query on a worker thread while the next is built; for a large one, rule by rule
with Spark's own settings) and written as Parquet with the same
staging-and-rename swap as ingestion, so a killed audit never leaves a partial
findings table.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable

from auditor.engine.context import AuditContext, AuditOptions, RuleContext
from auditor.engine.findings import conform, detection, findings_arrow_schema, group_replicas, stored_evidence
from auditor.engine.rule import Rule, discover
from auditor.engine.views import closure


@dataclass
class AuditResult:
    findings: list[dict]
    rule_seconds: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    as_of_ms: int = 0
    summary: dict = field(default_factory=dict)  # report data (``report=True``): see auditor.report.spark.data
    plots: dict = field(default_factory=dict)
    report_error: str | None = None  # report data could not be computed (findings are still complete)
    run_id: str | None = None  # set by write_findings
    # where the time went: "plan" (building the queries), "run" (collecting them), "report" (plots);
    # rule by rule: "rules" and "report"
    phase_seconds: dict[str, float] = field(default_factory=dict)
    released_views: list[str] = field(default_factory=list)  # unpersisted after their last reader (rule by rule)
    plots_with_rules: bool = False  # the plot series were collected with the rules (a small dump: _early_plots)


def select_rules(rules: list[Rule], only: tuple[str, ...] | list[str] = ()) -> list[Rule]:
    if not only:
        return rules
    known = {r.id for r in rules}
    unknown = [r for r in only if r not in known]
    if unknown:
        raise ValueError(f"unknown rule(s): {', '.join(unknown)}")
    return [r for r in rules if r.id in only]


def audit(
    spark,
    tables_dir: str,
    *,
    options: AuditOptions | None = None,
    only: tuple[str, ...] | list[str] = (),
    out: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    report: bool = False,
    context: type[AuditContext] = AuditContext,
    together: bool | None = None,
) -> AuditResult:
    """Run the rules over ``tables_dir``. With ``report`` also compute the run
    summary and plot series reports show (:mod:`auditor.report.spark.data`); they are saved
    with the findings when ``out`` is given, so ``txn-audit report`` needs no Spark.

    ``context`` says where the tables come from: Parquet directories written by
    ``ingest`` (the default) or the batch job's Delta tables
    (:class:`auditor.batch.delta_rules.DeltaAuditContext`). The rule loop is the same,
    so both report the same findings for the same data.

    ``together``: the small-input path (:mod:`auditor.perf.tuning`): the report
    summary's and every rule's query collected as soon as each is built, one
    Spark job each, under the small-input settings, with the tables read as one
    partition; otherwise rule by rule. Default: when the ingest manifest says the dump has
    at most ``SMALL_AUDIT_BATCHES`` batches. Rule by rule gives each rule's time
    (``rule_seconds``) and keeps Spark's adaptive settings for large dumps."""
    from auditor.perf.tuning import call_site, small_audit, small_sql_conf, sql_conf

    ctx = context(spark, tables_dir, options)
    rules = select_rules(discover(), only)
    if together is None:  # a context that counts rows only when asked (Delta) has none yet: rule by rule
        together = small_audit(ctx.table_rows)
    ctx.single_partition = together
    result = AuditResult(findings=[])
    try:
        if together:
            with sql_conf(spark, small_sql_conf()), call_site(spark, "txn-audit audit"):
                _run_together(ctx, rules, result, progress, report)
        else:
            result.as_of_ms = ctx.as_of_ms
            _run_one_by_one(ctx, rules, result, progress, report)
        result.findings = group_replicas(result.findings)
        if out is not None:
            write_findings(spark, result, out)
    finally:
        result.released_views = list(ctx.released)
        ctx.close()
    return result


def _runnable(ctx: AuditContext, rule: Rule, result: AuditResult) -> bool:
    missing = [t for t in rule.needs if not ctx.has_rows(t)]
    if missing:
        result.skipped[rule.id] = f"no rows in {', '.join(missing)}"
    return not missing


def release_plan(rules: list[Rule], report: bool) -> dict[int, list[str]]:
    """After which rule (by index) each view can be released: the last rule that
    reads it or a view built on it; the report data (after every rule) keeps its own."""
    from auditor.report.spark.data import VIEWS_READ

    last: dict[str, int] = {}
    for i, rule in enumerate(rules):
        for v in closure(rule.views):
            last[v] = i
    if report:
        for v in closure(VIEWS_READ):
            last.pop(v, None)  # released by close(), after the report data
    plan: dict[int, list[str]] = {}
    for v, i in sorted(last.items()):
        plan.setdefault(i, []).append(v)
    return plan


def _run_one_by_one(ctx, rules, result, progress, report) -> None:
    releases = release_plan(rules, report)
    t_start = time.monotonic()
    for i, rule in enumerate(rules):
        if progress:
            progress(rule.id, i, len(rules))
        if _runnable(ctx, rule, result):
            t0 = time.monotonic()
            df = conform(rule.run(RuleContext(ctx, f"rule {rule.id}", rule.views)), rule)
            rows = df.collect()  # findings are few: materialise per rule for timing and reports
            result.rule_seconds[rule.id] = round(time.monotonic() - t0, 3)
            result.findings.extend(_findings(rule, (r.asDict(recursive=True) for r in rows)))
        for v in releases.get(i, ()):
            ctx.release(v)
    result.phase_seconds["rules"] = round(time.monotonic() - t_start, 3)
    if report:
        t0 = time.monotonic()
        _report_data(ctx, rules, result, progress, None)
        result.phase_seconds["report"] = round(time.monotonic() - t0, 3)


def _run_together(ctx, rules, result, progress, report) -> None:
    """Every rule's query (and the summary's) collected as soon as it is built.

    Building a query is Catalyst analysis on the Py4J thread; running one is the
    optimizer and the executor's tasks. On a small dump both are per-call
    overhead of a cold JVM, so each rule's query is collected by a worker thread
    (one Spark job per rule, :data:`auditor.engine.collect.PIPELINE_WORKERS` at a
    time) while the next rule's query is built: the two halves overlap on two
    cores instead of running one after the other."""
    from auditor.engine.collect import Pipeline

    t0 = time.monotonic()
    with Pipeline() as pipe:
        # the summary first: it needs no finding, so its job runs while the rules are built
        summary_q: dict[str, object] = {}
        if report:
            from auditor.report.spark.data import summary_queries

            try:
                summary_q = summary_queries(_report_context(ctx))
            except Exception as exc:  # noqa: BLE001 - the findings matter more than their charts: keep them
                result.report_error = f"{type(exc).__name__}: {exc}"
                report = False
        if "as_of" not in summary_q:
            summary_q["as_of"] = ctx.as_of  # the reference time of every run, report or not
        summary_job = pipe.submit_many({f"summary:{k}": v for k, v in summary_q.items()})
        for i, rule in enumerate(rules):
            if progress:
                progress(rule.id, i, len(rules))
            if _runnable(ctx, rule, result):
                pipe.submit(f"rule:{rule.id}",
                            conform(rule.run(RuleContext(ctx, f"rule {rule.id}", rule.views)), rule))
        plots_job = _early_plots(ctx, pipe, summary_job, result) if report else None
        t1 = time.monotonic()
        got = pipe.results()
        plot_rows = None
        if plots_job is not None:
            try:
                plot_rows = plots_job.result()
                result.plots_with_rules = True
            except Exception as exc:  # noqa: BLE001 - the findings matter more than their charts: keep them
                result.report_error = f"{type(exc).__name__}: {exc}"
    t2 = time.monotonic()
    result.phase_seconds.update(plan=round(t1 - t0, 3), run=round(t2 - t1, 3))
    for rule in rules:
        result.findings.extend(_findings(rule, got.get(f"rule:{rule.id}", [])))
    summary_rows = {k.split(":", 1)[1]: v for k, v in got.items() if k.startswith("summary:")}
    result.as_of_ms = max((int(r["as_of_ms"]) for r in summary_rows.get("as_of", []) if r.get("as_of_ms") is not None),
                          default=0)
    if report and result.report_error is None:
        _report_data(ctx, rules, result, progress, summary_rows, plot_rows)
        result.phase_seconds["report"] = round(time.monotonic() - t2, 3)


EARLY_PLOT_REPLICAS = 80  # a small dump with at most this many replicas gets its plot series with the rules


def _early_plots(ctx, pipe, summary_job, result):
    """The plot series of *every* partition, submitted as soon as the rules are: a
    small dump's few replicas cost the job little, and the report then needs no job
    after the findings (which only pick the partitions to show,
    ``auditor.report.spark.data.build_plots``). None, and the plots are collected after the
    findings as usual: no summary job, more than ``EARLY_PLOT_REPLICAS`` replicas,
    or a failure (the report data's, not the audit's)."""
    from auditor.report.spark.data import plot_queries, plot_ranges

    if summary_job is None:
        return None
    try:
        stats = summary_job.result().get("summary:replica_stats", [])
        if len(plot_ranges(stats)) > EARLY_PLOT_REPLICAS:
            return None
        queries = plot_queries(_report_context(ctx), stats)
    except Exception as exc:  # noqa: BLE001 - the findings matter more than their charts: keep them
        result.report_error = f"{type(exc).__name__}: {exc}"
        return None
    return pipe.submit_many({f"plots:{k}": v for k, v in queries.items()}, required=False) if queries else None


def _report_context(ctx):
    from auditor.report.spark.data import VIEWS_READ

    return RuleContext(ctx, "the report data", VIEWS_READ)


def _findings(rule: Rule, rows) -> list[dict]:
    """Collected detections of ``rule`` as findings (severity, message and remediation of their kind)."""
    from auditor.report.messages import render

    return [render(rule, detection(r, rule)) for r in rows]


def _report_data(ctx, rules, result, progress, rows, plot_rows=None) -> None:
    from auditor.report.spark.data import build_report_data

    if progress:
        progress("report data", len(rules), len(rules))
    try:
        result.summary, result.plots = build_report_data(_report_context(ctx), result.findings, rows, plot_rows)
    except Exception as exc:  # noqa: BLE001 - the findings matter more than their charts: keep them
        result.report_error = f"{type(exc).__name__}: {exc}"


def write_findings(spark, result: AuditResult, out: str) -> None:
    """Findings as Parquet (atomic directory swap) plus a small JSON manifest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from auditor.ingest.spark_job import new_run_id, staged

    run_id = new_run_id()
    rows = [{**f, "evidence": stored_evidence(f.get("evidence"))} for f in result.findings]
    table = pa.Table.from_pylist(rows, schema=findings_arrow_schema())
    manifest = {"run_id": run_id, "as_of_ms": result.as_of_ms, "rule_seconds": result.rule_seconds,
                "skipped": result.skipped, "findings": len(rows)}
    if result.summary:
        from auditor.report.spark.data import REPORT_DATA_VERSION

        manifest["report_data_version"] = REPORT_DATA_VERSION
        manifest["summary"] = result.summary
    with staged(out, run_id) as staging:
        pq.write_table(table, staging / "part-00000.parquet")
        (staging / "_audit.json").write_text(json.dumps(manifest, indent=2, default=str))
        if result.plots:
            # underscore prefix: Spark and pyarrow skip it when reading the directory as the findings table
            (staging / "_plots.json").write_text(json.dumps(result.plots, default=str))
    result.run_id = run_id


