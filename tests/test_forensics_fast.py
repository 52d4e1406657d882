"""``txn-audit timeline``'s two engines agree, ``--cluster``, late writes, the end row.

Every sample capture is ingested once into one tables directory (so several
clusters hold partitions of the same name, as in a shared dump). The pyarrow engine
(no Spark) and the Spark engine must give the same events, JSON for JSON, on a
partition of every capture, on every partition where the replay ends with an
open transaction (the findings) and on every partition with offsets between its
segments that none holds (the compacted ones: a row for each hole).
"""

from __future__ import annotations

import json
import re

import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from conftest import SAMPLE_LOGS
from auditor.cli.main import cli

pytestmark = pytest.mark.spark

HLW = json.loads((SAMPLE_LOGS / "hanging-late-write" / "expected.json").read_text())
HANG = HLW["expect"]["anomalies"][0]
PIPED_WIDTH = 200  # what the table views lay their lines out for when stdout is not a terminal


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory):
    from auditor.ingest.spark_job import ingest

    out = tmp_path_factory.mktemp("samples") / "tables"
    dirs = sorted(str(p) for p in SAMPLE_LOGS.iterdir() if p.is_dir())
    ingest(spark, dirs, str(out))
    return out


@pytest.fixture(scope="module")
def ctx(spark, tables):
    from auditor.engine.context import AuditContext

    c = AuditContext(spark, str(tables))
    c.single_partition = True  # a small dump: fewer Spark stages, the same rows
    yield c
    c.close()


def _replicas(tables) -> list[dict]:
    from auditor.tables.source import arrow_dataset

    rows = arrow_dataset(tables, "batches").to_table(
        columns=["cluster_id", "log_dir", "topic", "partition", "is_transactional"],
        filter=pc.field("source") == "segment").to_pylist()
    for r in rows:
        r["cluster_id"] = r["cluster_id"] or f"logdir:{r['log_dir']}"
    return rows


def _events(tl) -> list[str]:
    return [json.dumps(e, sort_keys=True, default=str) for e in tl.events()]


@pytest.fixture(scope="module")
def chosen(tables):
    """(cluster, topic, partition): the first partition of every cluster (a transactional
    one when there is one), plus every partition whose replay ends with an open transaction."""
    from auditor.forensics.timeline import ArrowTimeline, TimelineRequest

    rows = _replicas(tables)
    first: dict[str, tuple[str, int]] = {}
    for r in sorted(rows, key=lambda r: (not r["is_transactional"], r["topic"], r["partition"])):
        if r["topic"] is not None and r["partition"] is not None and not r["topic"].startswith("__cluster_metadata"):
            first.setdefault(r["cluster_id"], (r["topic"], r["partition"]))
    keys = {(c, t, p) for c, (t, p) in first.items()}
    for c, t, p in sorted({(r["cluster_id"], r["topic"], r["partition"]) for r in rows if r["is_transactional"]}):
        end = list(ArrowTimeline(tables, TimelineRequest(t, p, cluster=c)).events())[-1]
        if end["open_transactions"]:
            keys.add((c, t, p))
    return sorted(keys | _holed(tables))


def _holed(tables) -> set[tuple[str, str, int]]:
    """(cluster, topic, partition) of the replicas with offsets between segments that none holds."""
    from collections import defaultdict

    from auditor.model.replica import offset_holes_of_rows
    from auditor.tables.source import arrow_dataset

    by_replica = defaultdict(list)
    cols = ["cluster_id", "log_dir", "topic", "partition", "source", "file", "segment_base_offset", "base_offset",
            "last_offset", "magic"]
    for r in arrow_dataset(tables, "batches").to_table(columns=cols).to_pylist():
        if r["topic"] is not None and r["partition"] is not None and not r["topic"].startswith("__cluster_metadata"):
            by_replica[(r["cluster_id"] or f"logdir:{r['log_dir']}", r["log_dir"], r["topic"], r["partition"])].append(r)
    return {(c, t, p) for (c, _, t, p), rs in by_replica.items() if offset_holes_of_rows(rs)}


def test_arrow_and_spark_timelines_agree_on_every_sample_capture(tables, ctx, chosen):
    from auditor.forensics.timeline import ArrowTimeline, Timeline, TimelineRequest

    clusters = {r["cluster_id"] for r in _replicas(tables) if not r["topic"].startswith("__cluster_metadata")}
    assert {c for c, _, _ in chosen} == clusters and len(clusters) >= 18
    findings = gaps = 0
    for c, t, p in chosen:
        req = TimelineRequest(t, p, cluster=c)
        fast, slow = ArrowTimeline(tables, req), Timeline(ctx, req)
        assert fast.choose() == slow.choose(), (c, t, p)
        a, s = _events(fast), _events(slow)
        assert a == s, (c, t, p)
        end = json.loads(a[-1])
        findings += bool(end["open_transactions"])
        gaps += sum(json.loads(e)["event"] == "gap" for e in a)
        # the end row is never stamped earlier than a row above it
        times = [json.loads(e)["time_ms"] for e in a[:-1]]
        assert all(end["time_ms"] >= x for x in times if x is not None), (c, t, p)
    assert findings >= 5
    assert gaps >= 5  # the compacted partitions' holes between segments, shown by both engines


def test_the_high_watermark_is_one_rule_with_spark_and_without(tables, ctx):
    """Every replica's high watermark as the timeline's pyarrow engine finds it (the model's rule on
    rows, :func:`auditor.model.replica.high_watermark_of`, over the replica's checkpoint entry, its
    log end and whether its log dir was cleanly stopped:
    :func:`auditor.model.moving.stopped_log_dirs_of_rows`) is the audit's (the Spark form,
    :func:`auditor.model.producer_state.spark.high_watermarks`, in the ``last_stable_offsets`` view
    that ``stuck-lso`` reports from), on every partition of every sample capture: the log dirs of
    the captures that were not cleanly stopped among them."""
    from auditor.forensics.timeline import ArrowTimeline, Replica, TimelineRequest
    from auditor.model.replica import HighWatermark

    cols = ("cluster_id", "broker_id", "log_dir", "topic", "partition", "log_end_offset", "high_watermark", "hw",
            "hw_lower_bound")
    rows = [r.asDict() for r in ctx.last_stable_offsets.select(*cols).collect()
            if r["topic"] is not None and r["partition"] is not None]
    assert len(rows) >= 150, len(rows)  # every replica with a batch (173 when this was written)
    moved, live = 0, ArrowTimeline(tables, TimelineRequest("", 0))._live()
    for r in rows:
        tl = ArrowTimeline(tables, TimelineRequest(r["topic"], r["partition"], cluster=r["cluster_id"]))
        tl._live_cache = live  # the live log of the tables, decided once (each command decides it once)
        tl.replica = Replica(r["cluster_id"], r["broker_id"], r["log_dir"], 0, 0, r["log_end_offset"])
        key = (r["log_dir"], r["topic"], r["partition"])
        assert tl.log_bounds()["high_watermark"] == HighWatermark(r["hw"], r["high_watermark"], r["hw_lower_bound"]), key
        moved += r["hw_lower_bound"]
    assert moved >= 3, moved  # a capture of a broker killed with its checkpoint written (synthetic-kafka-python)


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _hlw_cluster(tables) -> str:
    (c,) = {r["cluster_id"] for r in _replicas(tables) if r["topic"] == HANG["topic"]}
    return c


def test_cli_engines_agree_with_bounds_and_producer_filter(tables):
    c = _hlw_cluster(tables)
    base = ["timeline", tables, "--topic", HANG["topic"], "--partition", HANG["partition"], "--cluster", c,
            "--format", "jsonl"]
    views = [[], ["--batches", "all"], ["--from", "5", "--to", HANG["last_offset"], "--producer-id", HANG["producer_id"]]]
    for extra in views:
        out = {}
        for engine in ("arrow", "spark"):
            res = _cli(*base, *extra, "--engine", engine)
            assert res.exit_code == 0, res.output
            assert f"({engine})" in res.stderr
            out[engine] = res.stdout
        assert out["arrow"] == out["spark"] and out["arrow"].count("\n") > 5, extra


def test_late_write_is_marked(tables):
    c = _hlw_cluster(tables)
    args = ["timeline", tables, "--topic", HANG["topic"], "--partition", HANG["partition"], "--cluster", c]
    evs = [json.loads(x) for x in _cli(*args, "--format", "jsonl").stdout.splitlines()]
    late = next(e for e in evs if e["event"] == "data" and e["offset"] == HANG["first_offset"] == 15)
    assert late["anomalies"] == ["late write"] and late["late_write"] is True
    assert late["after_marker_offset"] == HANG["after_marker_offset"]
    assert "late write after its session's ABORT marker" in late["detail"]
    # the earlier transactions of the same session after its COMMIT markers are not late writes
    others = [e for e in evs if e["event"] == "data" and e["opens_transaction"] and e is not late]
    assert others and not any(e["anomalies"] for e in others)
    assert all(e["late_write"] is False for e in others if e["after_marker_offset"] is not None)
    end = evs[-1]
    assert end["anomalies"] == ["LSO held by a late write"] and end["open_transactions"][0]["late_write"]
    times = [e["time_ms"] for e in evs[:-1]]
    assert end["time_ms"] == max(times)
    # the table: one line per event, within 200 columns when piped (details cut to fit), the late
    # write marked "!"; with --wide every detail whole
    res = _cli(*args)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert all(len(x) <= PIPED_WIDTH for x in lines)
    whole = _cli(*args, "--wide").stdout.splitlines()
    assert any(late["detail"] in x for x in whole) and any(x.startswith("!") and x.endswith("…") for x in lines)
    marked = [x for x in lines if x.startswith("!")]
    assert len(marked) == 2 and "late write" in marked[0] and re.search(r"\b15\.\.16\b", marked[0])
    assert "LSO held by a late write" in marked[1]
    assert sum(1 for x in lines if re.match(r"[ !] \d\d:\d\d:\d\d\.\d{3} ", x)) == len(evs)


def test_cluster_is_required_when_several_clusters_hold_the_partition(tables):
    rows = _replicas(tables)
    orders = sorted({r["cluster_id"] for r in rows if (r["topic"], r["partition"]) == ("orders", 0)})
    assert len(orders) >= 2
    for engine in ("arrow", "spark"):
        res = _cli("timeline", tables, "--topic", "orders", "--partition", "0", "--engine", engine)
        assert res.exit_code == 2, res.output
        assert res.stderr.startswith("Error: ") and "--cluster" in res.stderr
        assert all(c in res.stderr for c in orders) and "broker 1" in res.stderr
    res = _cli("timeline", tables, "--topic", "orders", "--partition", "0", "--cluster", orders[1], "--format", "jsonl")
    assert res.exit_code == 0, res.output
    assert f"cluster {orders[1]}" in res.stderr
    nope = _cli("timeline", tables, "--topic", "orders", "--partition", "0", "--cluster", "nope")
    assert nope.exit_code == 2 and nope.stderr.startswith("Error: ") and "clusters with one" in nope.stderr


def test_coordinator_cluster(tables):
    from auditor.tables.source import arrow_dataset

    rows = arrow_dataset(tables, "transaction_log").to_table(columns=["cluster_id", "transactional_id"]).to_pylist()
    by_id: dict[str, set] = {}
    for r in rows:
        if r["transactional_id"] is not None:
            by_id.setdefault(r["transactional_id"], set()).add(r["cluster_id"])
    tid, clusters = next((t, sorted(c)) for t, c in sorted(by_id.items()) if len(c) > 1)
    res = _cli("coordinator", tables, tid)
    assert res.exit_code == 2 and res.stderr.startswith("Error: ") and "--cluster" in res.stderr
    assert all(c in res.stderr for c in clusters)
    one = _cli("coordinator", tables, tid, "--cluster", clusters[0], "--format", "jsonl")
    assert one.exit_code == 0, one.output
    head = json.loads(one.stdout.splitlines()[0])
    assert head["cluster_id"] == clusters[0] and head["records"] > 0
    table = _cli("coordinator", tables, tid, "--cluster", clusters[0])
    assert table.exit_code == 0, table.output
    records = [x for x in table.stdout.splitlines() if re.match(r"[ !] \d\d:\d\d:\d\d\.\d{3} ", x)]
    assert len(records) == head["records"] and all(len(x) <= PIPED_WIDTH for x in records)
    assert _cli("coordinator", tables, tid, "--cluster", "nope").exit_code == 2
