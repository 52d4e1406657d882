"""What a report shows besides the findings: the run summary and the plot series.

``txn-audit report`` reads a findings directory without Spark, so everything
it shows that is not a finding column — what was read (log dirs, brokers,
partitions, batches), which transaction versions the dump shows, the LSO-lag
series and producer sessions of the partitions with findings — is computed
here, at audit time, while the tables are at hand, and saved next to the
findings (``_audit.json`` ``summary``, ``_plots.json``).

Cost: this runs after the rules, so it only aggregates. Transactions come from
``ctx.transactions`` (persisted by the rules; no second sort of ``batches``);
one grouped scan of ``batches`` per replica feeds both the per-log-dir counts
and the plots' time ranges; the plot series only touch the few partitions that
have findings: their batches are bucketed by time (a grouped aggregate, no
sort) and each plot is capped in points and transactions, so the output stays
small however large the dump.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from auditor.model.producer_state.spark import pins_by_bucket
from auditor.model.replica_key import REPLICA, join_replica

REPORT_DATA_VERSION = 2  # 2: each plotted partition carries the model's LSO (last_stable_offsets)
LSO_BUCKETS = 240  # points per LSO-lag series
MAX_PLOT_PARTITIONS = 40  # partitions with findings that get plots (most severe first)
MAX_SESSION_TRANSACTIONS = 400  # per partition: every open transaction plus the newest others


VIEWS_READ = ("last_stable_offsets", "producer_transactional_ids", "transactions")  # see AuditContext
# a dump whose plot series of every partition come to at most this many rows (plot_rows_bound) gets them
# with the rules. Was 80 replicas: all of sample_logs/ (203 replicas, 5,000 batches, 10,320 plot rows)
# then waited ~1.3 s after the findings for a plots job of its own (bench/JOURNAL.md).
EARLY_PLOT_ROWS = 100_000


@dataclass
class ReportData:
    """The report data as a reader the audit schedules with its rules
    (:class:`auditor.engine.runner.Reader`): the summary's queries run while the rules are
    built; the plot series of every partition run with the rules when they come to at most
    ``early_plot_rows`` rows (:func:`plot_rows_bound`: a small dump's cost the job little, and
    the report then needs no job after the findings, which only pick the partitions to show),
    else after the findings, for the partitions with findings only."""

    early_plot_rows: int = EARLY_PLOT_ROWS
    name: ClassVar[str] = "report data"
    views: ClassVar[tuple[str, ...]] = VIEWS_READ
    version: ClassVar[int] = REPORT_DATA_VERSION

    def queries(self, ctx) -> dict[str, object]:
        return summary_queries(ctx)

    def early_queries(self, ctx, rows: dict[str, list[dict]]) -> "dict[str, object] | None":
        stats = rows.get("replica_stats", [])
        return None if plot_rows_bound(stats) > self.early_plot_rows else plot_queries(ctx, stats)

    def collected(self, ctx, rows: dict[str, list[dict]]) -> tuple[dict, dict]:
        return build_summary(ctx, rows), {"replica_stats": rows.get("replica_stats", [])}

    def finish(self, ctx, summary: dict, summary_rows: dict, early_rows: "dict | None", findings: list[dict],
               clock, verdicts) -> tuple[dict, dict]:
        plots = build_plots(ctx, findings, summary_rows.get("replica_stats", []), early_rows, verdicts)
        return with_clock(summary, clock), plots


def sort_key(v: Any) -> tuple:
    """A sort key for one value of any kind found in a row: numbers, then text, then
    None (a log dir without meta.properties has no broker or cluster id, a finding may
    name no topic), so that sorting mixed rows never raises ``TypeError``."""
    if v is None:
        return (2, 0, "")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (0, v, "")
    return (1, 0, str(v))


def build_report_data(ctx, findings: list[dict], rows: dict[str, list[dict]] | None = None,
                      plot_rows: dict[str, list[dict]] | None = None) -> tuple[dict, dict]:
    """``(summary, plots)`` for the audit of ``ctx`` on their own (the runner builds them from
    what it collected with the rules); both plain JSON-able dicts. ``rows``: the results of
    :func:`summary_queries` when the caller has collected them; ``plot_rows``: the collected
    :func:`plot_queries` of every partition (``plots:<name>``). The reference instants and the
    open transactions' verdicts are decided here as the runner decides them."""
    from auditor.engine.collect import collect_many
    from auditor.model.clock import Clock
    from auditor.model.verdict_table import INPUTS, Verdicts

    if rows is None:
        rows = collect_many(summary_queries(ctx))
    q = {"newest": ctx.newest_records}
    if ctx.has_rows("batches"):
        q["evidence"] = ctx.transaction_evidence.select(*INPUTS)
    clocked = collect_many(q)
    clock = Clock.of(clocked["newest"], given_ms=ctx.options.as_of_ms,
                     max_timeout_ms=ctx.options.transaction_max_timeout_ms)
    summary = with_clock(build_summary(ctx, {**rows, "newest": clocked["newest"]}), clock)
    got = None if plot_rows is None else {k.split(":", 1)[1]: v for k, v in plot_rows.items()}
    plots = build_plots(ctx, findings, rows.get("replica_stats", []), got, Verdicts(clocked.get("evidence", []), clock))
    return summary, plots


def summary_queries(ctx) -> dict[str, object]:
    """The queries the summary reads, by name (small results, collected together).

    ``replica_stats`` — per replica: batches, segment batches, first/last segment
    batch timestamp: the one full scan of ``batches`` here; the summary (per log
    dir) and the plots (time range of each partition with findings) both read it.
    ``transactions`` — transactions by outcome and commit-marker epoch;
    ``feature_levels``, ``client_versions`` — the transaction versions the logs
    show. (Each cluster's reference instant is the runner's: :func:`with_clock`.)"""
    from pyspark.sql import functions as F

    if not ctx.has_rows("batches"):
        return {}
    seg = F.col("source") == "segment"
    ts = F.when(seg & (F.col("max_timestamp") >= 0), F.col("max_timestamp"))
    q = {"replica_stats": ctx.table("batches").groupBy(*REPLICA).agg(
        F.count(F.lit(1)).alias("batches"),
        F.sum(seg.cast("long")).alias("segment_batches"),
        F.min(ts).alias("t0"),
        F.max(ts).alias("t1"),
    )}
    # transactions by outcome, and the commit-marker epoch (TV2 bumps it: marker epoch = data epoch + 1;
    # with transaction.version 0/1 a commit marker carries the data epoch — aborts can be bumped by
    # the coordinator fencing a producer under any version, so only commits tell the versions apart)
    commit = F.col("state") == "commit"
    # once per topic-partition: the replicas of a partition hold the same transactions
    once = ctx.transactions.select("cluster_id", "topic", "partition", "producer_id", "first_offset", "state",
                                   "marker_epoch", "data_epoch_max").distinct()
    q["transactions"] = once.groupBy("cluster_id", "state").agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.when(commit & (F.col("marker_epoch") == F.col("data_epoch_max")), 1).otherwise(0)).alias("same"),
        F.sum(F.when(commit & (F.col("marker_epoch") == F.col("data_epoch_max") + 1), 1).otherwise(0)).alias("bump"),
    )
    if ctx.has_rows("metadata_records"):
        q["feature_levels"] = (ctx.table("metadata_records")
                               .where("record_type = 'FEATURE_LEVEL_RECORD' AND feature_name = 'transaction.version'")
                               .select("cluster_id", "feature_level", "source", "offset", "snapshot_end_offset"))
    if ctx.has_coordinator_log:
        q["client_versions"] = (
            ctx.table("transaction_log")
            .where("record_type = 'transaction' AND NOT is_tombstone AND client_transaction_version IS NOT NULL")
            .groupBy("client_transaction_version").agg(F.countDistinct("cluster_id", "transactional_id").alias("ids")))
    return q


# -- summary ------------------------------------------------------------------


def _manifest(ctx) -> dict:
    m = ctx.tables_dir / "_ingest.json"
    try:
        return json.loads(m.read_text()) if m.exists() else {}
    except (OSError, ValueError):
        return {}


def empty_summary() -> dict[str, Any]:
    """The summary's keys (docs/report-format.md documents each), before anything was read."""
    return {
        "inputs": [],
        "ingest_run_id": None,
        "bad_files": None,
        "clusters": [],
        "brokers": [],
        "partitions": 0,
        "replicas": 0,
        "batches": 0,
        "transactions": {},
        "transaction_versions": {"seen": [], "commit_markers": {"same_epoch": 0, "epoch_bump": 0},
                                 "feature_levels": {}, "client_versions": {}},
        "time_range": {"first_ms": None, "last_ms": None},
        "input_lacks": [],
    }


def build_summary(ctx, rows: dict[str, list[dict]]) -> dict[str, Any]:
    """What was read and what it shows, small enough for ``_audit.json``, from
    the collected :func:`summary_queries`."""
    manifest = _manifest(ctx)
    summary = empty_summary()
    summary.update(inputs=list(manifest.get("inputs") or []), ingest_run_id=manifest.get("run_id"),
                   bad_files=manifest.get("bad_files"),
                   # what the verdicts could not rest on (auditor.model.coverage)
                   input_lacks=ctx.coverage.lacking())
    if not ctx.has_rows("batches"):
        return summary

    per_dir: dict[tuple, dict] = {}
    for r in rows.get("replica_stats", []):
        d = per_dir.setdefault((r.get("cluster_id"), r.get("broker_id"), r.get("log_dir")), {
            "cluster_id": r.get("cluster_id"), "broker_id": r.get("broker_id"), "log_dir": r.get("log_dir"),
            "partitions": 0, "batches": 0, "first_ms": None, "last_ms": None})
        d["batches"] += int(r.get("batches") or 0)
        d["partitions"] += 1 if r.get("segment_batches") else 0
        t0, t1 = r.get("t0"), r.get("t1")
        if t0 is not None:
            d["first_ms"] = t0 if d["first_ms"] is None else min(d["first_ms"], t0)
        if t1 is not None:
            d["last_ms"] = t1 if d["last_ms"] is None else max(d["last_ms"], t1)
    brokers_meta = manifest.get("brokers") if isinstance(manifest.get("brokers"), dict) else {}
    brokers = list(per_dir.values())
    seen_dirs = {b_["log_dir"] for b_ in brokers}
    for log_dir, meta in brokers_meta.items():  # log dirs that were read but hold no batches
        if log_dir not in seen_dirs and isinstance(meta, dict):
            brokers.append({"cluster_id": meta.get("cluster_id"), "broker_id": meta.get("broker_id"),
                            "log_dir": log_dir, "partitions": 0, "batches": 0, "first_ms": None, "last_ms": None})
    brokers.sort(key=lambda x: (sort_key(x["cluster_id"]), sort_key(x["broker_id"]), sort_key(x["log_dir"])))
    summary["brokers"] = brokers
    summary["replicas"] = sum(x["partitions"] for x in brokers)
    summary["partitions"] = len({(r.get("cluster_id"), r.get("topic"), r.get("partition"))
                                 for r in rows.get("replica_stats", []) if r.get("segment_batches")})
    summary["batches"] = sum(x["batches"] for x in brokers)
    firsts = [x["first_ms"] for x in brokers if x["first_ms"] is not None]
    lasts = [x["last_ms"] for x in brokers if x["last_ms"] is not None]
    summary["time_range"] = {"first_ms": min(firsts) if firsts else None, "last_ms": max(lasts) if lasts else None}

    states: dict[str, int] = {}
    per_cluster: dict[str, dict[str, int]] = {}
    for r in rows.get("transactions", []):
        state = r["state"] if r["state"] is not None else "unknown"
        states[state] = states.get(state, 0) + int(r["n"])
        pc = per_cluster.setdefault(r["cluster_id"], {"same_epoch": 0, "epoch_bump": 0})
        pc["same_epoch"] += int(r["same"] or 0)
        pc["epoch_bump"] += int(r["bump"] or 0)
    summary["transactions"] = dict(sorted(states.items(), key=lambda kv: sort_key(kv[0])))
    tv = summary["transaction_versions"]
    tv["commit_markers"] = {"same_epoch": sum(v["same_epoch"] for v in per_cluster.values()),
                            "epoch_bump": sum(v["epoch_bump"] for v in per_cluster.values())}
    seen = set()
    if tv["commit_markers"]["same_epoch"]:
        seen.add("0/1")
    if tv["commit_markers"]["epoch_bump"]:
        seen.add("2")
    tv["seen"] = sorted(seen)
    tv["feature_levels"] = _feature_levels(rows.get("feature_levels", []))
    tv["client_versions"] = _client_versions(rows.get("client_versions", []))

    newest = {r["cluster_id"] for r in rows.get("newest", [])}
    clusters = sorted({x["cluster_id"] for x in brokers if x["cluster_id"] is not None} | newest, key=sort_key)
    summary["clusters"] = [{
        "cluster_id": c,
        "as_of_ms": None,  # the run's reference instant: with_clock
        "brokers": sorted({x["broker_id"] for x in brokers if x["cluster_id"] == c and x["broker_id"] is not None}),
        "transaction_version_feature": tv["feature_levels"].get(c),
        "commit_markers": per_cluster.get(c, {"same_epoch": 0, "epoch_bump": 0}),
    } for c in clusters]
    return summary


def with_clock(summary: dict, clock) -> dict:
    """``summary`` (of :func:`build_summary`) with each cluster's reference instant
    (:class:`auditor.model.clock.Clock`): a choice of the run, not a fact of the tables."""
    for c in summary.get("clusters", []):
        c["as_of_ms"] = clock.as_of(c["cluster_id"])
    return summary


def _feature_levels(rows: list[dict]) -> dict[str, int]:
    """Latest finalized ``transaction.version`` per cluster from the metadata log
    (a FeatureLevelRecord; snapshot rows count as of their snapshot's end offset)."""
    best: dict[str, tuple[int, int]] = {}
    for r in rows:
        if r["feature_level"] is None:
            continue
        pos = (r["snapshot_end_offset"] - 1) if r["source"] == "snapshot" and r["snapshot_end_offset"] is not None else (r["offset"] or 0)
        if r["cluster_id"] not in best or pos >= best[r["cluster_id"]][0]:
            best[r["cluster_id"]] = (pos, int(r["feature_level"]))
    return {c: lvl for c, (_, lvl) in sorted(best.items(), key=lambda kv: sort_key(kv[0]))}


def _client_versions(rows: list[dict]) -> dict[str, int]:
    """Transactional ids per client transaction version the coordinator recorded
    (``client_transaction_version``, value version 1 records only)."""
    rows = sorted(rows, key=lambda r: sort_key(r["client_transaction_version"]))
    return {str(r["client_transaction_version"]): int(r["ids"]) for r in rows}


# -- plots --------------------------------------------------------------------

_SEVERITY_ORDER = ("info", "warning", "error", "critical")


def affected_partitions(findings: list[dict], limit: int = MAX_PLOT_PARTITIONS) -> tuple[list[tuple], int]:
    """(cluster_id, topic, partition) of findings that name a partition, most
    severe first, at most ``limit``; and how many were left out."""
    worst: dict[tuple, tuple[int, int]] = {}
    for f in findings:
        if f.get("topic") is None or f.get("partition") is None:
            continue
        try:
            k = (f.get("cluster_id"), str(f["topic"]), int(f["partition"]))
        except (TypeError, ValueError):
            continue
        rank = _SEVERITY_ORDER.index(f["severity"]) if f.get("severity") in _SEVERITY_ORDER else 0
        r, n = worst.get(k, (-1, 0))
        worst[k] = (max(r, rank), n + 1)
    ordered = sorted(worst, key=lambda k: (-worst[k][0], -worst[k][1], sort_key(k[0]), k[1], k[2]))
    return ordered[:limit], max(0, len(ordered) - limit)


def _join_replica(df, small):
    """``df`` joined to the small frame ``small`` on the replica key (broadcast; null-safe, as every
    join on the key: :func:`auditor.model.replica_key.join_replica`)."""
    from pyspark.sql import functions as F

    return join_replica(df, F.broadcast(small))


def plot_ranges(stats: list[dict], keys: "list[tuple] | None" = None) -> list[list]:
    """Per replica to plot (of the partitions ``keys``; every one with ``None``): its
    key, first and last segment timestamp and the bucket width, from ``replica_stats``."""
    wanted = None if keys is None else set(keys)
    rows = []
    for r in stats:
        if r.get("t0") is None or r.get("t1") is None:
            continue
        if wanted is not None and (r.get("cluster_id"), r.get("topic"), r.get("partition")) not in wanted:
            continue
        width = max(1, math.ceil((r["t1"] - r["t0"] + 1) / LSO_BUCKETS))
        rows.append([*(r.get(c) for c in REPLICA), int(r["t0"]), int(r["t1"]), int(width)])
    return rows


def plot_rows_bound(stats: list[dict]) -> int:
    """At most how many rows :func:`plot_queries` of every partition collects, from
    ``replica_stats``: per replica with a plot range, its log-end series (a bucket per segment
    batch at most, :data:`LSO_BUCKETS` at most), its pin series (:data:`LSO_BUCKETS` at most: one
    transaction may be open through all of them), its sessions (a transaction per batch of any
    source at most; :data:`MAX_SESSION_TRANSACTIONS` besides the open ones, which are batches too)
    and its offsets row."""
    total = 0
    for r in stats:
        if r.get("t0") is None or r.get("t1") is None:
            continue
        total += min(int(r.get("segment_batches") or 0), LSO_BUCKETS) + LSO_BUCKETS + int(r.get("batches") or 0) + 1
    return total


def plot_queries(ctx, stats: list[dict], keys: "list[tuple] | None" = None) -> dict[str, object]:
    """The plot series' queries (collected together: one Spark job) for the replicas
    of the partitions ``keys``, or of every partition with ``None`` (the small-input
    audit builds them before the findings are known: ``runner._run``);
    {} when there is nothing to plot."""
    if (keys is not None and not keys) or not ctx.has_rows("batches"):
        return {}
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    b = (ctx.table("batches").where("source = 'segment' AND max_timestamp >= 0")
         .select(*REPLICA, "last_offset", "max_timestamp"))
    if keys is not None:
        keys_df = F.broadcast(ctx.small_df([list(k) for k in keys], "cluster_id string, topic string, partition int"))
        b = b.join(keys_df, ["cluster_id", "topic", "partition"], "inner")
    n = LSO_BUCKETS
    rng_rows = plot_ranges(stats, keys)
    if not rng_rows:
        return {}
    rng = ctx.small_df(
        rng_rows, "cluster_id string, broker_id int, log_dir string, topic string, partition int, t0 long, t1 long, width long")

    def bucket(col):
        return F.least(F.greatest(F.floor((col - F.col("t0")) / F.col("width")), F.lit(0)), F.lit(n - 1)).cast("int")

    # log end offset at the end of each time bucket (max offset appended in it; made monotonic below)
    ends = (_join_replica(b, rng).groupBy(*REPLICA, bucket(F.col("max_timestamp")).alias("bucket"))
            .agg((F.max("last_offset") + 1).alias("end")))

    # open transactions at the end of each bucket: the earliest one pins the LSO (the model's rule)
    tx = _join_replica(ctx.transactions.where("first_offset IS NOT NULL"), rng)
    b_last = F.when(F.col("marker_timestamp").isNull(), F.lit(n - 1)).otherwise(bucket(F.col("marker_timestamp")) - 1)
    pins = pins_by_bucket(tx, bucket(F.col("first_timestamp")), b_last)

    # producer sessions: every open transaction plus the newest others
    w = Window.partitionBy(*REPLICA).orderBy(F.coalesce("first_offset", "marker_offset").desc())
    sess = _join_replica(ctx.transactions, rng.select(*REPLICA))
    if ctx.has_coordinator_log:
        from auditor.model.coordinator import transactional_id_of

        sess = sess.join(transactional_id_of(ctx.producer_transactional_ids), ["cluster_id", "producer_id"], "left")
    else:
        sess = sess.withColumn("transactional_id", F.lit(None).cast("string"))
    sess = (sess.withColumn("_rn", F.row_number().over(w))
            .withColumn("_total", F.count(F.lit(1)).over(Window.partitionBy(*REPLICA)))
            .where((F.col("_rn") <= MAX_SESSION_TRANSACTIONS) | (F.col("state") == "open"))
            .select(*REPLICA, "_total", "producer_id", "transactional_id",
                    F.col("data_epoch_max").alias("producer_epoch"), "marker_epoch", "state",
                    "first_offset", F.col("last_data_offset").alias("last_offset"), "first_timestamp",
                    F.col("last_data_timestamp").alias("last_timestamp"), "marker_offset", "marker_type",
                    "marker_timestamp", "coordinator_epoch", "data_batches"))

    # the partition's current offsets and LSO: the producer-state model's (never recomputed here)
    hw_rows = _join_replica(ctx.last_stable_offsets, rng.select(*REPLICA)).select(
        *REPLICA, F.col("high_watermark").alias("checkpoint_high_watermark"), "log_end_offset", "log_start_offset",
        "hw", "first_unstable_offset", "last_stable_offset", "open_transactions")
    return {"ends": ends, "pins": pins, "sessions": sess, "hw": hw_rows}


def _sessions_by_replica(sess: list[dict], verdicts) -> tuple[dict[tuple, list], dict[tuple, int]]:
    """The collected producer sessions per replica (without the replica's columns), each open one
    with the audit's verdict and age, and each replica's count of sessions before the cut."""
    sess_by: dict[tuple, list] = {}
    totals: dict[tuple, int] = {}
    for r in sess:
        k = tuple(r[c] for c in REPLICA)
        d = {c: v for c, v in r.items() if c not in REPLICA}
        v = verdicts.of(r) if d.get("state") == "open" else None
        d.update(verdict=v and v["verdict"], age_ms=v and v["age_ms"])
        totals[k] = int(d.pop("_total"))
        sess_by.setdefault(k, []).append(d)
    return sess_by, totals


def build_plots(ctx, findings: list[dict], stats: list[dict], got: "dict[str, list[dict]] | None",
                verdicts) -> dict[str, Any]:
    """LSO-lag series and producer sessions for the partitions with findings
    (``stats``: the collected ``replica_stats`` query); one Spark job, unless
    ``got`` holds the collected :func:`plot_queries` of every partition already (then ``ctx``
    may be None). An open transaction's verdict and age are the audit's (``verdicts``:
    :class:`auditor.model.verdict_table.Verdicts`)."""
    keys, omitted = affected_partitions(findings)
    plots: dict[str, Any] = {"version": REPORT_DATA_VERSION, "lso_buckets": LSO_BUCKETS,
                             "max_session_transactions": MAX_SESSION_TRANSACTIONS,
                             "partitions": [], "omitted_partitions": omitted}
    if not keys or (got is None and not ctx.has_rows("batches")):
        return plots
    rng_rows = plot_ranges(stats, keys)
    if not rng_rows:
        return plots
    if got is None:
        from auditor.engine.collect import collect_many

        got = collect_many(plot_queries(ctx, stats, keys))
    n = LSO_BUCKETS
    ends, pins, sess, hw_rows = got["ends"], got["pins"], got["sessions"], got["hw"]

    def key(r) -> tuple:
        return tuple(r[c] for c in REPLICA)

    ends_by: dict[tuple, dict[int, int]] = {}
    for r in ends:
        ends_by.setdefault(key(r), {})[r["bucket"]] = int(r["end"])
    pins_by: dict[tuple, dict[int, Any]] = {}
    for r in pins:
        pins_by.setdefault(key(r), {})[r["bucket"]] = (r["pin"], int(r["open"]))
    sess_by, totals = _sessions_by_replica(sess, verdicts)
    hw_by = {key(r): r for r in hw_rows}

    out = []
    for r in sorted(rng_rows, key=lambda x: (keys.index((x[0], x[3], x[4])), sort_key(x[2]), sort_key(x[1]))):
        k = tuple(r[:5])
        t0, t1, width = r[5], r[6], r[7]
        series = []
        end = 0
        last_bucket = min(n - 1, (t1 - t0) // width)
        # the series is the LSO over time (a time bucket's earliest open transaction vs its log end,
        # the model's pins_by_bucket); the partition's LSO now is the model's, below
        for bkt in range(last_bucket + 1):
            end = max(end, ends_by.get(k, {}).get(bkt, 0))
            t = min(t0 + (bkt + 1) * width - 1, t1)
            pin, nopen = pins_by.get(k, {}).get(bkt, (None, 0))
            lso = min(int(pin["first_offset"]), end) if pin is not None else end
            series.append({
                "t": int(t), "log_end": int(end), "lso": int(lso), "lag": int(end - lso),
                "lag_ms": int(max(0, t - pin["first_timestamp"])) if pin is not None and lso < end else 0,
                "pinned_by": int(pin["producer_id"]) if pin is not None and lso < end else None,
                "open": nopen,
            })
        sessions = sorted(sess_by.get(k, []), key=lambda s: (s["first_offset"] if s["first_offset"] is not None else s["marker_offset"] or 0))
        p = hw_by.get(k) or {}
        out.append({
            **dict(zip(REPLICA, k)),
            "t0": t0, "t1": t1, "bucket_ms": width,
            # ctx.last_stable_offsets (auditor.model.producer_state.spark.last_stable_offsets)
            "high_watermark": p.get("hw"),
            "checkpoint_high_watermark": p.get("checkpoint_high_watermark"),
            "log_end_offset": p.get("log_end_offset"),
            "log_start_offset": p.get("log_start_offset"),
            "first_unstable_offset": p.get("first_unstable_offset"),
            "last_stable_offset": p.get("last_stable_offset"),
            "open_transactions": p.get("open_transactions"),
            "lso_lag": series,
            "transactions_total": totals.get(k, 0),
            "sessions": sessions,
        })
    plots["partitions"] = out
    return plots
