"""Run the rule catalog over ingested tables and write the findings table.

Rules build their queries over shared views (:mod:`auditor.engine.views`); each rule's
findings are conformed to one schema, collected (each rule's query on a worker
thread while the next is built; a small dump under the small-input settings, a large one
with Spark's own) and written as Parquet with the same
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
    as_of_given: bool = False  # --as-of given; else as_of_ms is the newest record of each cluster's input
    summary: dict = field(default_factory=dict)  # report data (``report=True``): see auditor.report.spark.data
    plots: dict = field(default_factory=dict)
    report_error: str | None = None  # report data could not be computed (findings are still complete)
    run_id: str | None = None  # set by write_findings
    # where the time went: "plan" (building the queries), "run" (collecting them), "report" (plots);
    # rule_seconds: each rule's job on its worker (two run at a time)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    released_views: list[str] = field(default_factory=list)  # unpersisted once their readers ran (a large input)
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
    small: bool | None = None,
) -> AuditResult:
    """Run the rules over ``tables_dir``. With ``report`` also compute the run
    summary and plot series reports show (:mod:`auditor.report.spark.data`); they are saved
    with the findings when ``out`` is given, so ``txn-audit report`` needs no Spark.

    ``context`` says where the tables come from: Parquet directories written by
    ``ingest`` (the default) or the batch job's Delta tables
    (:class:`auditor.batch.delta_rules.DeltaAuditContext`). The rule loop is the same,
    so both report the same findings for the same data.

    One path for every size (:func:`_run`): the report summary's and every rule's query
    collected as soon as each is built, on worker threads. ``small``: the small-input
    settings (:mod:`auditor.perf.tuning`: Spark's SQL settings for a few thousand rows,
    the tables read as one partition). Default: when the tables hold at most
    ``SMALL_AUDIT_BATCHES`` batches; a larger dump keeps Spark's adaptive settings and has
    each persisted view released once every rule reading it has been collected."""
    from auditor.perf.tuning import call_site, small_audit, small_sql_conf, sql_conf

    ctx = context(spark, tables_dir, options)
    rules = select_rules(discover(), only)
    if small is None:  # a context that counts rows only when asked (Delta) counts batches here
        small = small_audit(ctx.table_rows)
    ctx.single_partition = small
    result = AuditResult(findings=[], as_of_given=ctx.options.as_of_ms is not None)
    try:
        with sql_conf(spark, small_sql_conf() if small else {}), call_site(spark, "txn-audit audit"):
            _run(ctx, rules, result, progress, report, release=not small)
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


class _Releases:
    """Views released as soon as every job that may read them is done: the summary's
    (it reads the reference time) and those of the rules up to the view's last reader
    (:func:`release_plan`). Jobs run two at a time, so the last reader's job is not
    always the last to finish. Called on the building thread only."""

    def __init__(self, ctx, rules, report: bool) -> None:
        self.ctx, self.plan = ctx, release_plan(rules, report)
        self.jobs: list[list] = []  # futures per rule index
        self.summary = None

    def after(self, futures: list) -> None:
        """The next rule's jobs (none when it was skipped) have been submitted."""
        self.jobs.append(futures)
        self.poll()

    def poll(self, wait: bool = False) -> None:
        if self.summary is not None:
            if wait:
                self.summary.exception()  # waits; its failure is raised by Pipeline.results()
            elif not self.summary.done():
                return
        for i in sorted(self.plan):
            if i >= len(self.jobs):
                break
            ready = [f for fs in self.jobs[: i + 1] for f in fs]
            if wait:
                for f in ready:
                    f.exception()  # waits; a failure is raised by Pipeline.results()
            elif not all(f.done() for f in ready):
                break
            for v in self.plan.pop(i):
                self.ctx.release(v)


def _run(ctx, rules, result, progress, report, *, release: bool) -> None:
    """Every rule's query (and the summary's) collected as soon as it is built.

    Building a query is Catalyst analysis on the Py4J thread; running one is the
    optimizer and the executor's tasks. Each rule's query is collected by a worker
    thread (one Spark job per rule, :data:`auditor.engine.collect.PIPELINE_WORKERS` at a
    time) while the next rule's query is built, so the driver's planning overlaps the
    tasks instead of leaving the cores idle between rules (with the collector and compiler
    choices of :mod:`auditor.perf.tuning`, a 1 M-batch audit took 27-31 s rule by rule and
    20-21 s this way: bench/JOURNAL.md, "one audit path"). ``release``: unpersist each view
    once the jobs that read it are done (:class:`_Releases`), not only at the end."""
    from auditor.engine.collect import Pipeline

    t0 = time.monotonic()
    releases = _Releases(ctx, rules, report) if release else None
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
        if releases is not None:
            releases.summary = summary_job
        for i, rule in enumerate(rules):
            if progress:
                progress(rule.id, i, len(rules))
            futures = []
            if _runnable(ctx, rule, result):
                futures.append(pipe.submit(f"rule:{rule.id}",
                                           conform(rule.run(RuleContext(ctx, f"rule {rule.id}", rule.views)), rule)))
            if releases is not None:
                releases.after(futures)
        plots_job = _early_plots(ctx, pipe, summary_job, result) if report else None
        t1 = time.monotonic()
        got = pipe.results()
        if releases is not None:
            releases.poll(wait=True)
        plot_rows = None
        if plots_job is not None:
            try:
                plot_rows = plots_job.result()
                result.plots_with_rules = True
            except Exception as exc:  # noqa: BLE001 - the findings matter more than their charts: keep them
                result.report_error = f"{type(exc).__name__}: {exc}"
    t2 = time.monotonic()
    result.phase_seconds.update(plan=round(t1 - t0, 3), run=round(t2 - t1, 3))
    result.rule_seconds = {name.split(":", 1)[1]: s for name, s in pipe.seconds.items() if name.startswith("rule:")}
    for rule in rules:
        result.findings.extend(_findings(rule, got.get(f"rule:{rule.id}", [])))
    summary_rows = {k.split(":", 1)[1]: v for k, v in got.items() if k.startswith("summary:")}
    result.as_of_ms = max((int(r["as_of_ms"]) for r in summary_rows.get("as_of", []) if r.get("as_of_ms") is not None),
                          default=0)
    if report and result.report_error is None:
        _report_data(ctx, rules, result, progress, summary_rows, plot_rows)
        result.phase_seconds["report"] = round(time.monotonic() - t2, 3)


# a dump whose plot series of every partition come to at most this many rows (plot_rows_bound) gets them
# with the rules. Was 80 replicas: all of sample_logs/ (203 replicas, 5,000 batches, 10,320 plot rows)
# then waited ~1.3 s after the findings for a plots job of its own (bench/JOURNAL.md).
EARLY_PLOT_ROWS = 100_000


def _early_plots(ctx, pipe, summary_job, result):
    """The plot series of *every* partition, submitted as soon as the rules are: a
    small dump's rows cost the job little, and the report then needs no job
    after the findings (which only pick the partitions to show,
    ``auditor.report.spark.data.build_plots``). None, and the plots are collected after the
    findings as usual: no summary job, more than ``EARLY_PLOT_ROWS`` rows at most
    (:func:`auditor.report.spark.data.plot_rows_bound`), or a failure (the report data's, not the audit's)."""
    from auditor.report.spark.data import plot_queries, plot_rows_bound

    if summary_job is None:
        return None
    try:
        stats = summary_job.result().get("summary:replica_stats", [])
        if plot_rows_bound(stats) > EARLY_PLOT_ROWS:
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
    manifest = {"run_id": run_id, "as_of_ms": result.as_of_ms, "as_of_given": result.as_of_given,
                "rule_seconds": result.rule_seconds,
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


