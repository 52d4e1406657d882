"""The ``runs`` Delta table: run numbering, resume after a kill, per-run figures.

Runs are numbered 1, 2, 3... A run writes its row with ``status = 'running'``
before anything else and rewrites it with ``status = 'finished'`` and its
figures as its last commit (the table is small: each is one overwrite of it). If the
newest row is still ``running``, the previous invocation died: the next one
*resumes* it — same run number and start time, ``attempts`` + 1 — instead of
starting a new run. The tables, ledger and findings written by a killed attempt
and its resumption are therefore those of one clean run; only this table tells
that it took two attempts, and its figures (files decoded, rows written,
seconds) describe the attempt that finished the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from auditor.batch.deltaio import is_delta, overwrite, read
from auditor.spark.local_rows import arrow_df

RUNS_SCHEMA = pa.schema(
    [
        pa.field("run", pa.int64()),
        pa.field("attempts", pa.int32()),
        pa.field("status", pa.string()),  # running | finished
        pa.field("started_at_ms", pa.int64()),
        pa.field("finished_at_ms", pa.int64()),
        pa.field("inputs", pa.list_(pa.string())),
        pa.field("files_seen", pa.int64()),
        pa.field("files_decoded", pa.int64()),
        pa.field("files_gone", pa.int64()),
        pa.field("rows_written", pa.int64()),
        pa.field("table_rows_written", pa.map_(pa.string(), pa.int64())),
        pa.field("findings_open", pa.int64()),
        pa.field("findings_new", pa.int64()),
        pa.field("findings_resolved", pa.int64()),
        pa.field("seconds", pa.float64()),
        pa.field("stage_seconds", pa.map_(pa.string(), pa.float64())),
        pa.field("audit_key", pa.string()),  # what the audit depended on (see job.audit_key)
        pa.field("audited", pa.bool_()),  # false: nothing it depends on changed, the findings were reused
    ]
)


@dataclass
class RunInfo:
    run: int
    attempt: int
    started_at_ms: int
    resumed: bool
    rows: list[dict] = field(default_factory=list)  # the runs table as this run last wrote it


def history(spark, uri: str) -> list[dict]:
    if not is_delta(spark, uri):
        return []
    return [r.asDict(recursive=True) for r in read(spark, uri).orderBy("run").collect()]


def _write(spark, uri: str, rows: list[dict], row: dict) -> list[dict]:
    """The runs table with ``row`` in place of its run's row: one small overwrite."""
    rows = [r for r in rows if r["run"] != row["run"]] + [row]
    rows.sort(key=lambda r: r["run"])

    def arrow_row(r: dict) -> dict:
        return {**{f.name: r.get(f.name) for f in RUNS_SCHEMA},
                "table_rows_written": list((r.get("table_rows_written") or {}).items()),
                "stage_seconds": list((r.get("stage_seconds") or {}).items())}

    overwrite(arrow_df(spark, pa.Table.from_pylist([arrow_row(r) for r in rows], schema=RUNS_SCHEMA)), uri)
    return rows


def begin(spark, uri: str, inputs: list[str], now_ms: int) -> RunInfo:
    rows = history(spark, uri)
    last = rows[-1] if rows else None
    if last is not None and last["status"] == "running":
        info = RunInfo(last["run"], last["attempts"] + 1, last["started_at_ms"], True, rows)
    else:
        info = RunInfo((last["run"] + 1) if last else 1, 1, now_ms, False, rows)
    info.rows = _write(spark, uri, rows, {"run": info.run, "attempts": info.attempt, "status": "running",
                                          "started_at_ms": info.started_at_ms, "inputs": inputs})
    return info


def finish(spark, uri: str, info: RunInfo, figures: dict) -> dict:
    row = {"run": info.run, "attempts": info.attempt, "status": "finished", "started_at_ms": info.started_at_ms,
           **figures}
    info.rows = _write(spark, uri, info.rows, row)
    return row


def last_finished(info: RunInfo) -> dict | None:
    done = [r for r in info.rows if r["status"] == "finished" and r["run"] < info.run]
    return done[-1] if done else None
