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
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

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
    max_timeout_ms: int = 900_000  # the transaction.max.timeout.ms ages were judged against
    max_timeout_given: bool = False  # --max-timeout-ms given; else Kafka's default, assumed
    summary: dict = field(default_factory=dict)  # the report data's (a ``report`` reader given): see Reader
    plots: dict = field(default_factory=dict)
    report_error: str | None = None  # report data could not be computed (findings are still complete)
    run_id: str | None = None  # set by write_findings
    # where the time went: "plan" (building the queries), "run" (collecting them), "report" (plots);
    # rule_seconds: each rule's job on its worker (two run at a time)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    released_views: list[str] = field(default_factory=list)  # unpersisted once their readers ran (a large input)
    plots_with_rules: bool = False  # the plot series were collected with the rules (a small dump: _early_plots)
    # what the queries collected, before anything depending on the reference instant was decided: a
    # second audit of the same tables with another --as-of or timeout finishes from it (finish_again)
    collected: "Collected | None" = None
    report_data_version: int | None = None  # the reader's, with its summary and plots


class Reader(Protocol):
    """What an audit collects besides the rules' detections, in the same Spark jobs: the report
    data (:class:`auditor.report.spark.data.ReportData`, passed in by the commands that report).
    It reads ``views`` through a context of its own (kept until it is done), its ``queries`` run
    while the rules are built, its ``early_queries`` (None: not now) with the rules; what it
    builds of them is kept in :class:`Collected`, and :meth:`finish` completes it once the
    findings and the verdicts are decided. A failure of a reader is its own (``report_error``):
    the findings stand."""

    name: str
    views: tuple[str, ...]
    version: int

    def queries(self, ctx) -> dict[str, object]:
        """Queries by name, collected with the clock's (``newest``) in one job."""

    def early_queries(self, ctx, rows: dict[str, list[dict]]) -> "dict[str, object] | None":
        """Queries to collect with the rules, from the collected :meth:`queries`; None: after."""

    def collected(self, ctx, rows: dict[str, list[dict]]) -> tuple[dict, dict]:
        """``(summary, summary_rows)`` from the collected :meth:`queries`: nothing depending on
        the reference instant."""

    def finish(self, ctx, summary: dict, summary_rows: dict, early_rows: "dict | None", findings: list[dict],
               clock, verdicts) -> tuple[dict, dict]:
        """``(summary, plots)``: ``summary`` with the clock's reference instants, the plots of
        ``findings`` (from ``early_rows``, or through ``ctx`` when they were not collected; ``ctx``
        is None when deciding again without Spark)."""


@dataclass
class Collected:
    """An audit's collected rows, none of them depending on the reference instant or
    ``transaction.max.timeout.ms``: each rule's detections, the open transactions' verdict
    inputs (:data:`auditor.model.verdict_table.INPUTS`), each cluster's newest timestamp, the
    summary (its clusters' reference instants left to :func:`finish`) and the plot rows of every
    partition. ``complete``: nothing of the report needs Spark after it (the plot rows were
    collected with the rules, or no report was asked for)."""

    rules: dict[str, list[dict]] = field(default_factory=dict)
    evidence: list[dict] = field(default_factory=list)
    newest: list[dict] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    rule_seconds: dict[str, float] = field(default_factory=dict)
    summary: dict | None = None
    plot_rows: dict | None = None
    report_error: str | None = None
    complete: bool = True
    summary_rows: dict = field(default_factory=dict)  # replica_stats: what the plots are drawn over

    def save(self, path: Path) -> None:
        """Written whole or not at all (a temporary file renamed over ``path``)."""
        import dataclasses

        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(dataclasses.asdict(self), default=str))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: Path) -> "Collected | None":
        """What :meth:`save` wrote; None when it is missing or unreadable (then the audit runs)."""
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


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
    report: Reader | None = None,
    context: type[AuditContext] = AuditContext,
    small: bool | None = None,
) -> AuditResult:
    """Run the rules over ``tables_dir``. With a ``report`` reader also compute what it reads
    (:class:`Reader`: the run summary and plot series reports show); they are saved with the
    findings when ``out`` is given, so ``txn-audit report`` needs no Spark.

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


def release_plan(rules: list[Rule], kept: tuple[str, ...] = ()) -> dict[int, list[str]]:
    """After which rule (by index) each view can be released: the last rule that
    reads it or a view built on it; a reader's views (``kept``; read after every rule) are not."""
    last: dict[str, int] = {}
    for i, rule in enumerate(rules):
        for v in closure(rule.views):
            last[v] = i
    for v in closure(kept):
        last.pop(v, None)  # released by close(), after the reader
    plan: dict[int, list[str]] = {}
    for v, i in sorted(last.items()):
        plan.setdefault(i, []).append(v)
    return plan


class _Releases:
    """Views released as soon as every job that may read them is done: the summary's
    (it reads the reference time) and those of the rules up to the view's last reader
    (:func:`release_plan`). Jobs run two at a time, so the last reader's job is not
    always the last to finish. Called on the building thread only."""

    def __init__(self, ctx, rules, kept: tuple[str, ...]) -> None:
        self.ctx, self.plan = ctx, release_plan(rules, kept)
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
    releases = _Releases(ctx, rules, report.views if report is not None else ()) if release else None
    with Pipeline() as pipe:
        # the summary first: it needs no finding, so its job runs while the rules are built
        summary_q: dict[str, object] = {}
        if report is not None:
            try:
                summary_q = report.queries(_reader_context(ctx, report))
            except Exception as exc:  # noqa: BLE001 - the findings matter more than their charts: keep them
                result.report_error = f"{type(exc).__name__}: {exc}"
                report = None
        summary_q.update(_clock_queries(ctx, rules, report is not None))
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
        plots_job = _early_plots(ctx, report, pipe, summary_job, result) if report is not None else None
        t1 = time.monotonic()
        got = pipe.results()
        if releases is not None:
            releases.poll(wait=True)
        plot_rows = None
        if plots_job is not None:
            try:
                plot_rows = plots_job.result()
            except Exception as exc:  # noqa: BLE001 - the findings matter more than their charts: keep them
                result.report_error = f"{type(exc).__name__}: {exc}"
    t2 = time.monotonic()
    result.phase_seconds.update(plan=round(t1 - t0, 3), run=round(t2 - t1, 3))
    rows = {k.split(":", 1)[1]: v for k, v in got.items() if k.startswith("summary:")}
    c = Collected(rules={r.id: got.get(f"rule:{r.id}", []) for r in rules}, evidence=rows.pop("verdict_evidence", []),
                  newest=rows.get("newest", []), skipped=dict(result.skipped),
                  rule_seconds={name.split(":", 1)[1]: s for name, s in pipe.seconds.items() if name.startswith("rule:")},
                  report_error=result.report_error, complete=report is None or plot_rows is not None)
    if report is not None and result.report_error is None:
        _summary(ctx, report, c, rows, plot_rows)
    finish(c, rules, ctx.options, result, ctx=ctx, progress=progress, report=report)
    if report is not None:
        result.phase_seconds["report"] = round(time.monotonic() - t2, 3)


def _clock_queries(ctx, rules, report: bool) -> dict[str, object]:
    """What the reference instant and the verdicts are decided from, collected with the summary
    (before any view is released): each cluster's newest timestamp and, when a rule or the report
    reads the open transactions' verdicts, their decision inputs."""
    from auditor.model.verdict_table import INPUTS

    q: dict[str, object] = {"newest": ctx.newest_records}
    if ctx.has_rows("batches") and (report or any("transaction_evidence" in closure(r.views) for r in rules)):
        q["verdict_evidence"] = ctx.transaction_evidence.select(*INPUTS)
    return q


def _summary(ctx, report: Reader, c: Collected, rows: dict, plot_rows) -> None:
    """The reader's summary (its clusters' reference instants left to :func:`finish`) and the
    rows its plots are drawn from, into ``c``."""
    try:
        c.summary, c.summary_rows = report.collected(_reader_context(ctx, report), rows)
        c.plot_rows = None if plot_rows is None else {k.split(":", 1)[1]: v for k, v in plot_rows.items()}
    except Exception as exc:  # noqa: BLE001 - the findings matter more than their charts: keep them
        c.report_error = f"{type(exc).__name__}: {exc}"


def finish(c: Collected, rules: list[Rule], options: AuditOptions, result: AuditResult, *, ctx=None,
           progress=None, report: Reader | None = None) -> None:
    """What depends on the reference instant and ``transaction.max.timeout.ms``, from the collected
    rows ``c``: the clock, every open transaction's verdict, each rule's ``decide`` step, the
    findings (rendered from their kinds, one per partition across replicas), and the ``report``
    reader's reference instants and plots. No Spark, unless ``ctx`` is given and the plot rows were
    not collected with the rules (a large dump's plots are collected for the partitions with findings)."""
    from auditor.model.clock import Clock
    from auditor.model.verdict_table import Verdicts

    clock = Clock.of(c.newest, given_ms=options.as_of_ms, max_timeout_ms=options.transaction_max_timeout_ms)
    verdicts = Verdicts(c.evidence, clock)
    findings = []
    for rule in rules:
        findings.extend(_findings(rule, c.rules.get(rule.id, []), verdicts))
    result.findings = group_replicas(findings)
    result.as_of_ms = clock.run_as_of_ms
    result.max_timeout_ms = options.transaction_max_timeout_ms
    result.max_timeout_given = options.transaction_max_timeout_given
    ids = {r.id for r in rules}  # the rules of this audit: all those collected, or the --rule subset
    result.skipped = {k: v for k, v in c.skipped.items() if k in ids}
    result.rule_seconds = {k: v for k, v in c.rule_seconds.items() if k in ids}
    result.report_error = c.report_error
    result.collected = c
    if report is not None and c.summary is not None and c.report_error is None:
        if progress:
            progress(report.name, len(rules), len(rules))
        _report_data(ctx, report, c, result, clock, verdicts)


def _early_plots(ctx, report: Reader, pipe, summary_job, result):
    """The reader's early queries (the plot series of every partition of a small dump),
    submitted as soon as the rules are, from its summary rows: the report then needs no job
    after the findings. None, and what it needs is collected after the findings: no summary
    job, no early queries, or a failure (the reader's, not the audit's)."""
    if summary_job is None:
        return None
    try:
        rows = {k.split(":", 1)[1]: v for k, v in summary_job.result().items()}
        queries = report.early_queries(_reader_context(ctx, report), rows)
    except Exception as exc:  # noqa: BLE001 - the findings matter more than their charts: keep them
        result.report_error = f"{type(exc).__name__}: {exc}"
        return None
    return pipe.submit_many({f"plots:{k}": v for k, v in queries.items()}, required=False) if queries else None


def _reader_context(ctx, report: Reader):
    return RuleContext(ctx, report.name, report.views)


def _findings(rule: Rule, rows, verdicts) -> list[dict]:
    """Collected detections of ``rule`` as findings: completed by its ``decide`` step (the verdict
    and age of the transaction it is about; None: not a finding at this reference instant), then
    severity, message and remediation of their kind."""
    from auditor.engine.messages import render

    out = []
    for r in rows:
        f = detection(r, rule)
        if rule.decide is not None:
            f = rule.decide(f, verdicts)
            if f is None:
                continue
        out.append(render(rule, f))
    return out


def _report_data(ctx, report: Reader, c: Collected, result: AuditResult, clock, verdicts) -> None:
    """The reader's summary with each cluster's reference instant, and the plots of the partitions
    with findings."""
    import copy

    try:
        got = c.plot_rows
        if got is None and ctx is None:
            raise RuntimeError("the plot rows were not kept: audit the tables again")
        result.summary, result.plots = report.finish(
            None if ctx is None else _reader_context(ctx, report), copy.deepcopy(c.summary), c.summary_rows, got,
            result.findings, clock, verdicts)
        result.report_data_version = report.version
        result.plots_with_rules = got is not None
    except Exception as exc:  # noqa: BLE001 - the findings matter more than their charts: keep them
        result.report_error = f"{type(exc).__name__}: {exc}"


def finish_again(c: Collected, options: AuditOptions, only: tuple[str, ...] | list[str] = (), *,
                 report: Reader | None = None) -> AuditResult:
    """An audit of the same tables as the one that collected ``c`` (a complete one), with other
    options: only what depends on the reference instant and the timeout is decided again (with
    ``report``, the reader the first audit had, its summary and plots too)."""
    rules = select_rules(discover(), only)
    result = AuditResult(findings=[], as_of_given=options.as_of_ms is not None)
    finish(c, rules, options, result, report=report)
    return result


def write_findings(spark, result: AuditResult, out: str) -> None:
    """Findings as Parquet (atomic directory swap) plus a small JSON manifest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from auditor.ingest.spark_job import new_run_id, staged

    run_id = new_run_id()
    rows = [{**f, "evidence": stored_evidence(f.get("evidence"))} for f in result.findings]
    table = pa.Table.from_pylist(rows, schema=findings_arrow_schema())
    manifest = {"run_id": run_id, "as_of_ms": result.as_of_ms, "as_of_given": result.as_of_given,
                "max_timeout_ms": result.max_timeout_ms, "max_timeout_given": result.max_timeout_given,
                "rule_seconds": result.rule_seconds,
                "skipped": result.skipped, "findings": len(rows)}
    if result.summary:
        manifest["report_data_version"] = result.report_data_version
        manifest["summary"] = result.summary
    with staged(out, run_id) as staging:
        pq.write_table(table, staging / "part-00000.parquet")
        (staging / "_audit.json").write_text(json.dumps(manifest, indent=2, default=str))
        if result.plots:
            # underscore prefix: Spark and pyarrow skip it when reading the directory as the findings table
            (staging / "_plots.json").write_text(json.dumps(result.plots, default=str))
    result.run_id = run_id


