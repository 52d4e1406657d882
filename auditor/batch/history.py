"""The ``findings`` Delta table: every finding ever reported, with its history.

A finding is identified by a *finding key*: a hash of the rule and of where and
whom it is about (cluster, broker, log dir, topic, partition, producer id and
epoch, transactional id, first offset). Its other columns (severity, message,
last offset, evidence...) are the latest values. Each run merges its findings
in one Delta MERGE:

* a new key is inserted: ``first_seen_run`` = ``last_seen_run`` = this run, ``runs_seen`` 1;
* a key seen again: ``last_seen_*`` move to this run, ``runs_seen`` + 1; a resolved
  finding that comes back is open again (``resolved_*`` cleared);
* an open key this run does not report (of a rule this run evaluated) is **resolved**, not deleted:
  ``resolved_run``/``resolved_at_ms`` say when (a hanging transaction later
  aborted, a segment deleted by retention).

The merge is idempotent per run: a key whose ``last_seen_run`` is already this
run only has its latest values refreshed, and a finding already resolved stays
as it is, so a run that is killed after its merge and resumed (same run number,
see ``runs``) counts nothing twice.
"""

from __future__ import annotations

import hashlib
import json

from auditor.batch.deltaio import sql_str
from auditor.engine.findings import FINDING_COLUMNS, stored_evidence

KEY_COLUMNS = ("rule", "cluster_id", "broker_id", "log_dir", "topic", "partition", "producer_id", "producer_epoch",
               "transactional_id", "first_offset")
HISTORY_COLUMNS: list[tuple[str, str]] = [("finding_key", "string"), *FINDING_COLUMNS] + [
    ("status", "string"),  # open | resolved
    ("first_seen_run", "bigint"),
    ("first_seen_ms", "bigint"),
    ("last_seen_run", "bigint"),
    ("last_seen_ms", "bigint"),
    ("resolved_run", "bigint"),
    ("resolved_at_ms", "bigint"),
    ("runs_seen", "int"),
]
LATEST = [n for n, _ in FINDING_COLUMNS]


def schema_ddl() -> str:
    return ", ".join(f"`{n}` {t}" for n, t in HISTORY_COLUMNS)


def with_keys(findings: list[dict]) -> list[dict]:
    """Findings with a ``finding_key`` (kept if they have one); findings that agree
    on every key column (rare) are told apart by their order on (last offset, message)."""
    groups: dict[str, list[dict]] = {}
    keyed = [f for f in findings if f.get("finding_key")]
    for f in findings:
        if f.get("finding_key"):
            continue
        raw = json.dumps([f.get(k) for k in KEY_COLUMNS], default=str)
        groups.setdefault(raw, []).append(f)
    out = list(keyed)
    for raw, fs in groups.items():
        fs = sorted(fs, key=lambda f: (f.get("last_offset") is None, f.get("last_offset") or 0, f.get("message") or ""))
        for i, f in enumerate(fs):
            k = raw if i == 0 else f"{raw}#{i}"
            out.append({**f, "finding_key": hashlib.sha1(k.encode()).hexdigest()})
    return out


def merge_findings(spark, uri: str, findings: list[dict], run: int, now_ms: int, rules: list[str]) -> None:
    """Merge one run's findings; only findings of ``rules`` (the rules this run
    evaluated) can be resolved by their absence."""
    from delta.tables import DeltaTable
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(schema_ddl())
    (DeltaTable.createIfNotExists(spark).location(uri).addColumns(schema).execute())
    _add_new_columns(spark, uri)
    src_schema = StructType.fromDDL(", ".join(f"`{n}` {t}" for n, t in [("finding_key", "string"), *FINDING_COLUMNS]))
    rows = [tuple(dict(stored_evidence(f.get("evidence"))) if n == "evidence" else f.get(n)
                  for n, _ in [("finding_key", "string"), *FINDING_COLUMNS]) for f in with_keys(findings)]
    src = spark.createDataFrame(rows, src_schema)
    r, t = str(int(run)), str(int(now_ms))
    evaluated = ", ".join(sql_str(x) for x in sorted(rules)) or "NULL"
    latest = {n: f"s.`{n}`" for n in LATEST}
    insert = {"finding_key": "s.finding_key", **latest, "status": "'open'", "first_seen_run": r, "first_seen_ms": t,
              "last_seen_run": r, "last_seen_ms": t, "resolved_run": "CAST(NULL AS BIGINT)",
              "resolved_at_ms": "CAST(NULL AS BIGINT)", "runs_seen": "1"}
    seen_again = {**latest, "status": "'open'", "last_seen_run": r, "last_seen_ms": t,
                  "resolved_run": "CAST(NULL AS BIGINT)", "resolved_at_ms": "CAST(NULL AS BIGINT)",
                  "runs_seen": "t.runs_seen + 1"}
    (
        DeltaTable.forPath(spark, uri).alias("t")
        .merge(src.alias("s"), "t.finding_key = s.finding_key")
        .whenMatchedUpdate(condition=f"t.last_seen_run = {r}", set=latest)  # same run again: no double count
        .whenMatchedUpdate(set=seen_again)
        .whenNotMatchedInsert(values=insert)
        .whenNotMatchedBySourceUpdate(condition=f"t.status = 'open' AND t.rule IN ({evaluated})",
                                      set={"status": "'resolved'", "resolved_run": r, "resolved_at_ms": t})
        .execute()
    )


def _add_new_columns(spark, uri: str) -> None:
    """Columns this release writes that a table written by an older one lacks (``kind``,
    ``replicas``, ``remediation_commands``) are added, null in the old rows."""
    have = {f.name for f in spark.read.format("delta").load(uri).schema.fields}
    missing = [(n, t) for n, t in HISTORY_COLUMNS if n not in have]
    if missing:
        cols = ", ".join(f"`{n}` {t}" for n, t in missing)
        spark.sql(f"ALTER TABLE delta.`{uri}` ADD COLUMNS ({cols})")


def summary(spark, uri: str, run: int) -> dict[str, int]:
    from pyspark.sql import functions as F

    df = spark.read.format("delta").load(uri)
    row = df.agg(
        F.count(F.when(F.col("status") == "open", 1)).alias("open"),
        F.count(F.when(F.col("first_seen_run") == run, 1)).alias("new"),
        F.count(F.when(F.col("resolved_run") == run, 1)).alias("resolved"),
    ).first()
    return {"open": int(row["open"]), "new": int(row["new"]), "resolved": int(row["resolved"])}


def reported_in(spark, uri: str, run: int) -> list[dict]:
    """The findings run ``run`` reported (open, last seen in it), as the rules returned them."""
    return _open(spark, uri, f"last_seen_run = {int(run)}")


def open_findings(spark, uri: str) -> list[dict]:
    """Every finding open in the history, as the rules last returned it: what is open now, also
    of rules the latest run did not evaluate (``--rule``), whose findings it left as they were
    (``batch --metrics``)."""
    return _open(spark, uri)


def _open(spark, uri: str, where: str = "TRUE") -> list[dict]:
    df = spark.read.format("delta").load(uri).where(f"status = 'open' AND ({where})")
    return [r.asDict(recursive=True) for r in df.select("finding_key", *LATEST).collect()]
