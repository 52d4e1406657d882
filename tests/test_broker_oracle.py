"""The broker as oracle: our live log and producer-state model against Kafka's own log loading.

Every partition directory of every broker log dir in ``sample_logs/`` and in the
external corpus of real files when it is there (``tests/conftest.py`` REAL_LOGS), and
one made here (an undecodable coordinator record in a valid batch, after an unclean
shutdown), is loaded twice:

* by Kafka's ``UnifiedLog.create`` (``LogLoader`` + ``ProducerStateManager``) of 4.3.1 and
  of 4.4.0 (each test runs for both; one ingest serves both, each load takes seconds), offline
  on a copy (``tests/kafka_oracle.py``, ``scripts/kafka/java/LogStateOracle.java``), including
  ``sample_logs/kafka-4.4``, the capture a 4.4.0 broker wrote;
* by this project: ingest, the live log (``AuditContext.table`` /
  :mod:`auditor.model.livelog`), the reference model's
  :func:`~auditor.model.producer_state.reference.load_replica` over the ingested rows,
  and the Spark model's last stable offsets that the rules read.

Per partition they must agree on the segments that make up the log, the log end
offset, every producer entry (epoch, coordinator epoch, first/last sequence,
last data offset, last timestamp, open transaction), the open transactions and
the last stable offset. Both sides get the same high watermark (the
checkpointed one, else the log end, as a leader would have) and the same "now"
(the newest batch timestamp of the log dir).

One difference is by design and is checked as such: the Spark model replays the
live log from its start, the broker seeds from its newest producer snapshot. A
transaction the snapshot remembers whose data retention removed (first offset
below the log start) is open for the broker and invisible to the replay; the
``snapshot-log-mismatch`` rule (``open-txn-below-log-start``) reports it.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import HAVE_REAL_LOGS, REAL_LOGS, SAMPLE_LOGS
from kafka_oracle import load_partitions, requests_for_log_dirs
from auditor.ingest.spark_job import ingest
from auditor.engine.context import AuditContext
from auditor.model.producer_state.reference import load_replica
from scripts.kafka.harness import KAFKA_4_4, NEWEST

pytestmark = pytest.mark.spark
VERSIONS = (NEWEST, KAFKA_4_4)

#: the fewest partitions the oracle must load (so a lost directory fails instead of shrinking the test):
#: with the external corpus, and of sample_logs/ alone
MIN_PARTITIONS = 300 if HAVE_REAL_LOGS else 240  # sample_logs/ alone: 250

#: the fewest partitions of several segments on topics the cleaner leaves alone (the offset-hole test)
MIN_ROLLED = 20  # sample_logs/ alone: 32
MIN_HOLED = 5  # sample_logs/ alone: 8

PRODUCER_FIELDS = ("producer_id", "producer_epoch", "coordinator_epoch", "first_sequence", "last_sequence",
                   "last_data_offset", "current_txn_first_offset", "last_timestamp")


def _log_dirs() -> list[Path]:
    dirs = sorted(p.parent for p in SAMPLE_LOGS.glob("*/*/meta.properties"))
    if HAVE_REAL_LOGS:
        dirs += sorted(p.parent for p in REAL_LOGS.rglob("meta.properties"))
    return [Path(os.path.abspath(d)) for d in dirs]


@pytest.fixture(scope="module")
def compared(spark, tmp_path_factory):
    log_dirs = _log_dirs()
    assert len(log_dirs) >= 30, log_dirs
    # a log dir without a clean shutdown whose __transaction_state segment holds a valid batch with an
    # undecodable record key between valid ones: recovery keeps it all (test_recovery_bad_record.py)
    from test_recovery_bad_record import _log_dir as bad_record_log_dir

    log_dirs.append(Path(os.path.abspath(bad_record_log_dir(tmp_path_factory.mktemp("bad-record")))))
    requests = requests_for_log_dirs(log_dirs)
    out = tmp_path_factory.mktemp("oracle") / "tables"
    ingest(spark, [str(d) for d in log_dirs], str(out))
    ctx = AuditContext(spark, str(out))
    live = ctx.live_log
    parts = {(r["log_dir"], r["topic"], r["partition"]): r.asDict() for r in ctx.partitions.collect()}
    lsos = {(r["log_dir"], r["topic"], r["partition"]): r.asDict() for r in ctx.last_stable_offsets.collect()}
    batches = defaultdict(list)
    for r in ctx.producer_batches.orderBy("log_dir", "topic", "partition", "base_offset").toLocalIterator():
        batches[(r["log_dir"], r["topic"], r["partition"])].append(r.asDict())
    snaps: dict[tuple, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for r in ctx.table("producer_snapshots").where("producer_id IS NOT NULL").collect():
        snaps[(r["log_dir"], r["topic"], r["partition"])][r["snapshot_offset"]].append(r.asDict())
    for r in ctx.table("producer_snapshots").select("log_dir", "topic", "partition", "snapshot_offset").distinct().collect():
        snaps[(r["log_dir"], r["topic"], r["partition"])].setdefault(r["snapshot_offset"], [])
    segments = defaultdict(set)
    inv = ctx.load("files").where("kind = 'segment'").select("path", "log_dir", "topic", "partition", "base_offset").collect()
    for f in inv:
        if live[f["path"]].live:
            segments[(f["log_dir"], f["topic"], f["partition"])].add(f["base_offset"])

    _holes_both_ways(ctx, parts)

    for q in requests:  # the same high watermark on both sides: the checkpointed one, else the log end
        p = parts.get((q["log_dir"], q["topic"], q["partition"]))
        if p is not None and q["high_watermark"] is None:
            q["high_watermark"] = p["log_end_offset"]
    answers = {v: load_partitions(requests, version=v) for v in VERSIONS}
    ctx.close()
    return requests, answers, parts, lsos, batches, snaps, segments


def _holes_both_ways(ctx, parts: dict) -> None:
    """Each replica's holes between segments, by the model's Spark query (``holes``) and by its
    execution on rows for the readers without Spark (``holes_of_rows``), into ``parts``."""
    from auditor.model.replica import offset_holes, offset_holes_of_rows

    live = ctx.table("batches")
    for p in parts.values():
        p["holes"], p["holes_of_rows"] = [], []
    for r in offset_holes(live).orderBy("hole_from_offset").collect():
        parts[(r["log_dir"], r["topic"], r["partition"])]["holes"].append((r["hole_from_offset"], r["hole_to_offset"]))
    rows = defaultdict(list)
    cols = ("log_dir", "topic", "partition", "source", "file", "segment_base_offset", "base_offset", "last_offset", "magic")
    for r in live.select(*cols).toLocalIterator():
        rows[(r["log_dir"], r["topic"], r["partition"])].append(r.asDict())
    for key, rs in rows.items():
        if key in parts:
            parts[key]["holes_of_rows"] = offset_holes_of_rows(rs)


@pytest.fixture(params=VERSIONS)
def version(request) -> str:
    return request.param


def test_the_oracle_loaded_every_partition(compared, version):
    requests, answers, *_ = compared
    answers = answers[version]
    assert len(answers) == len(requests) >= MIN_PARTITIONS, len(requests)
    errors = [(a["dir"], a["error"]) for a in answers if a["error"]]
    assert not errors, errors[:5]
    k44 = [q for q in requests if "/kafka-4.4/" in q["log_dir"]]
    assert len(k44) >= 14, "sample_logs/kafka-4.4 (written by Kafka 4.4.0) is among the log dirs"


def test_both_versions_load_every_partition_alike(compared):
    """4.4.0's loader and 4.3.1's agree on every partition of every log dir (the 4.4.0 capture too)."""
    requests, answers, *_ = compared
    fields = ("log_start_offset", "log_end_offset", "high_watermark", "first_unstable_offset", "last_stable_offset",
              "segments", "producers", "ongoing_transactions", "latest_snapshot_offset", "files_changed_by_load")
    for q, a, b in zip(requests, answers[NEWEST], answers[KAFKA_4_4]):
        assert {f: a[f] for f in fields} == {f: b[f] for f in fields}, q["dir"]


def test_no_offset_hole_between_segments_but_the_cleaners_below_the_lso(compared, version):
    """The model reads offsets no segment holds between two that do as a gap in the input
    (:func:`auditor.model.replica.log_bounds`): Kafka rolls segments at the log end offset, and
    the cleaner cleans only below the last stable offset. On every partition Kafka wrote here
    (sample_logs/, the external corpus): no hole where the cleaner does not run, and every hole of
    a compacted one ends at or before the last stable offset Kafka's own loader gives it. No
    healthy log is taken for a partial one."""
    requests, answers, parts, *_, segments = compared
    rolled = holed = 0
    for q, a in zip(requests, answers[version]):
        p = parts.get((q["log_dir"], q["topic"], q["partition"]))
        if p is None:
            continue
        rolled += not p["is_compacted"] and len(segments[(q["log_dir"], q["topic"], q["partition"])]) > 1
        if p["offsets_missing_between"]:
            holed += 1
            assert p["is_compacted"], (q["dir"], p["gap_from_offset"], p["gap_to_offset"])
            assert p["gap_to_offset"] <= a["last_stable_offset"], (q["dir"], p["gap_to_offset"], a["last_stable_offset"])
    print(f"\n{rolled} uncompacted partitions of several segments, {holed} compacted ones with holes")
    assert rolled >= MIN_ROLLED and holed >= MIN_HOLED, (rolled, holed)


def test_the_holes_are_one_rule_with_spark_and_without(compared):
    """The timeline's pyarrow engine finds the holes between segments by the model's rule
    (:func:`auditor.model.replica.offset_holes_of_rows`), as the audit's Spark query does
    (:func:`auditor.model.replica.offset_holes`, whose count is ``offsets_missing_between``),
    on every partition here, the compacted ones with holes among them."""
    _, _, parts, *_ = compared
    holed = [k for k, p in parts.items() if p["holes"]]
    assert len(holed) >= MIN_HOLED, holed
    for key, p in parts.items():
        assert p["holes_of_rows"] == p["holes"], key
        assert len(p["holes"]) == p["offsets_missing_between"], key


def test_live_segments_are_the_brokers(compared, version):
    requests, answers, parts, _, _, _, segments = compared
    answers = answers[version]
    checked = 0
    for q, a in zip(requests, answers):
        key = (q["log_dir"], q["topic"], q["partition"])
        if key not in parts:  # no batch at all: the broker keeps (or makes) one empty segment
            assert a["log_end_offset"] == a["log_start_offset"] or not segments.get(key), (key, a)
            continue
        assert sorted(segments[key]) == a["segments"], (key, sorted(segments[key]), a["segments"])
        assert parts[key]["log_end_offset"] == a["log_end_offset"], (key, a)
        checked += 1
    assert checked >= 100


def test_producer_state_equals_the_brokers(compared, version):
    requests, answers, parts, _, batches, snaps, _ = compared
    answers = answers[version]
    checked = producers = 0
    for q, a in zip(requests, answers):
        key = (q["log_dir"], q["topic"], q["partition"])
        p = parts.get(key)
        if p is None:
            assert a["producers"] == [] or not batches.get(key), key
            continue
        ours = load_replica(batches.get(key, []), log_start_offset=p["log_start_offset"],
                            log_end_offset=p["log_end_offset"], snapshots=snaps.get(key, {}),
                            clean_shutdown=q["clean_shutdown"], high_watermark=q["high_watermark"], now_ms=q["now_ms"],
                            producer_id_expiration_ms=q["producer_id_expiration_ms"])
        theirs = [{f: e[f] for f in PRODUCER_FIELDS} for e in a["producers"]]
        mine = [{f: e[f] for f in PRODUCER_FIELDS} for e in ours.producers()]
        assert mine == theirs, f"{key}\nours:   {mine}\nbroker: {theirs}"
        assert sorted((f, pid) for f, pid in ours.state.ongoing.items()) == \
            sorted((t["first_offset"], t["producer_id"]) for t in a["ongoing_transactions"]), key
        assert ours.last_stable_offset == a["last_stable_offset"], (key, ours.last_stable_offset, a)
        checked += 1
        producers += len(theirs)
    assert checked >= 100 and producers >= 50, (checked, producers)


def test_spark_last_stable_offset_equals_the_brokers(compared, version):
    """What the rules read (ctx.last_stable_offsets) against the broker's LSO and pin."""
    requests, answers, parts, lsos, _, _, _ = compared
    answers = answers[version]
    checked = 0
    for q, a in zip(requests, answers):
        key = (q["log_dir"], q["topic"], q["partition"])
        row = lsos.get(key)
        if row is None:
            continue
        hw = a["high_watermark"]
        ours = row["last_stable_offset"] if row["hw"] == hw else min(row["last_stable_offset"], hw)
        open_broker = sorted((t["first_offset"], t["producer_id"]) for t in a["ongoing_transactions"])
        if ours != a["last_stable_offset"]:
            # by design: only the snapshot remembers a transaction whose data lies below the log start
            assert open_broker and open_broker[0][0] < row["log_start_offset"], (key, ours, a)
            continue
        pin = None if row["pin"] is None else (row["pin"]["first_offset"], row["pin"]["producer_id"])
        assert pin == (open_broker[0] if open_broker else None), (key, pin, open_broker)
        checked += 1
    assert checked >= 100
