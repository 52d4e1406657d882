"""Tiered storage (KIP-405): ``__remote_log_metadata``, remote segments, and verdicts on tiered partitions.

Ground truth: Kafka's own ``RemoteLogMetadataSerde`` (kafka-storage 4.3.1, run on the Maven Central jars
by ``scripts/kafka/java/RemoteLogMetadataSerdeTool.java``) for the record format, and the real capture
``sample_logs/tiered-storage`` (a 4.3.1 broker with Kafka's LocalTieredStorage and
TopicBasedRemoteLogMetadataManager; ``expected.json`` written from what the clients did) for the rest.

* every record type, every state, with and without custom metadata and the TxnIndexEmpty tag:
  serialized by Kafka, decoded by us, field by field; and every record of the capture's
  ``__remote_log_metadata`` decoded by both;
* malformed values are per-record problems with a byte position;
* the remote store's files are matched to their metadata by segment id, and join the replica's live
  log below its local log start;
* the scan with the remote store replays the whole log (remote + local): the hanging transaction, the
  committed/aborted counts the clients recorded, no gap; without it the same hanging transaction, no
  unknown-producer-gap or torn-transaction claim about what lies in remote storage, and the report
  says what the input lacks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import SAMPLE_LOGS
from auditor.errors import DecodeError
from auditor.formats.remote_log_metadata import decode_remote_log_metadata
from auditor.ingest import remote_store, segments
from auditor.ingest.plan import make_plan
from auditor.ingest.tables import TABLES, iter_rows
from auditor.model import livelog
from auditor.model.remote import extents, readable_segment_ids
from scripts.kafka.harness import NEWEST, classpath

PROJECT = Path(__file__).resolve().parents[1]

CAPTURE = SAMPLE_LOGS / "tiered-storage"
BROKER = CAPTURE / "broker-1"
STORE = CAPTURE / "remote-store"
METADATA_LOG = BROKER / "__remote_log_metadata-0" / "00000000000000000000.log"
EXPECTED = json.loads((CAPTURE / "expected.json").read_text())
TOOL = PROJECT / "scripts" / "kafka" / "java" / "RemoteLogMetadataSerdeTool.java"


def _kafka(*args: str, stdin: str = "") -> list[dict]:
    """Kafka 4.3.1's RemoteLogMetadataSerde through the tool (JDK source launcher); fails without a JDK."""
    r = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classpath(NEWEST),
                        str(TOOL), *args], input=stdin.encode(), capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    return [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]


def _ours(value: bytes) -> dict:
    """Our row in the tool's field names."""
    row = decode_remote_log_metadata(None, value)
    epochs = row["segment_leader_epochs"]
    return {
        "topic": row["topic"], "topic_id": row["topic_id"], "partition": row["partition"],
        "segment_id": row["segment_id"], "start_offset": row["start_offset"], "end_offset": row["end_offset"],
        "broker_id": row["event_broker_id"], "max_timestamp_ms": row["max_timestamp_ms"],
        "event_timestamp_ms": row["event_timestamp_ms"], "segment_size_in_bytes": row["segment_size_in_bytes"],
        "custom_metadata": None if row["custom_metadata"] is None else row["custom_metadata"].hex(),
        "state": row["state"], "txn_index_empty": row["txn_index_empty"],
        "leader_epochs": None if epochs is None else [[e["leader_epoch"], e["offset"]] for e in epochs],
    }


def _capture_values() -> list[bytes]:
    with open(METADATA_LOG, "rb") as f:
        return [rec.value for _h, rec in segments.iter_data_records(f, os.path.getsize(METADATA_LOG), 0, None)]


_TYPES = {"RemoteLogSegmentMetadata": "RemoteLogSegmentMetadataRecord",
          "RemoteLogSegmentMetadataUpdate": "RemoteLogSegmentMetadataUpdateRecord",
          "RemotePartitionDeleteMetadata": "RemotePartitionDeleteMetadataRecord",
          "RemoteLogSegmentMetadataSnapshot": "RemoteLogSegmentMetadataSnapshotRecord"}


def _compare(k: dict) -> None:
    value = bytes.fromhex(k["hex"])
    got = _ours(value)
    assert decode_remote_log_metadata(None, value)["record_type"] == _TYPES[k["type"]]
    for field, want in k.items():
        if field in ("type", "hex"):
            continue
        assert got[field] == want, f"{k['type']} {field}: ours {got[field]!r}, Kafka {want!r}"


@pytest.mark.spark  # runs Kafka's Java code, like test_kafka_oracle
def test_every_record_type_and_state_as_kafka_serializes_it():
    fixtures = _kafka("fixtures")
    kinds = {(k["type"], k["state"]) for k in fixtures}
    assert len({t for t, _ in kinds}) == 4
    assert {s for t, s in kinds if t == "RemoteLogSegmentMetadataUpdate"} == {
        "COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_STARTED", "DELETE_SEGMENT_FINISHED"}
    assert {s for t, s in kinds if t == "RemotePartitionDeleteMetadata"} == {
        "DELETE_PARTITION_MARKED", "DELETE_PARTITION_STARTED", "DELETE_PARTITION_FINISHED"}
    assert any(k["custom_metadata"] for k in fixtures) and any(k.get("txn_index_empty") for k in fixtures)
    for k in fixtures:
        _compare(k)


@pytest.mark.spark
def test_every_record_of_the_capture_as_kafka_reads_it():
    values = _capture_values()
    assert len(values) >= 10
    kafka = _kafka("decode", stdin="\n".join(v.hex() for v in values))
    assert len(kafka) == len(values)
    for k in kafka:
        _compare(k)
    assert {k["type"] for k in kafka} == {"RemoteLogSegmentMetadata", "RemoteLogSegmentMetadataUpdate"}


def test_the_capture_decodes_through_the_table_without_problems():
    task = {"path": str(METADATA_LOG), "kind": "segment", "topic": "__remote_log_metadata", "partition": 0,
            "size": METADATA_LOG.stat().st_size, "base_offset": 0, "log_dir": str(BROKER)}
    rows = list(iter_rows(TABLES["remote_log_segments"], task))
    assert rows and all(r.get("_problem_kind") is None for r in rows)
    assert [r["offset"] for r in rows] == list(range(len(rows)))
    assert {r["log_topic"] for r in rows} == {"__remote_log_metadata"} and {r["topic"] for r in rows} == {"tiered"}


@pytest.mark.parametrize("value, kind, position", [
    (b"", "truncated", 0),
    (bytes([0, 0, 0]), "unknown-version", 0),  # frame version 0
    (bytes([1, 9, 0]), "unknown-version", 1),  # api key 9
    (bytes([1, 2, 1]), "unknown-version", 3),  # RemotePartitionDeleteMetadataRecord v1
    (bytes([1, 0xff, 0xff, 0x03, 0]), "corrupt", 1),  # api key beyond a short
])
def test_malformed_values_are_problems_with_a_position(value, kind, position):
    with pytest.raises(DecodeError) as e:
        decode_remote_log_metadata(None, value)
    assert e.value.kind == kind and e.value.position == position, (e.value.kind, e.value.position, e.value.message)


def test_truncated_and_trailing_bytes_of_a_real_record():
    v = _capture_values()[0]
    with pytest.raises(DecodeError) as e:
        decode_remote_log_metadata(None, v[:-4])
    assert e.value.kind == "truncated" and 0 < e.value.position <= len(v)
    with pytest.raises(DecodeError) as e:
        decode_remote_log_metadata(None, v + b"\0")
    assert e.value.kind == "corrupt" and e.value.position == len(v)
    with pytest.raises(DecodeError):
        decode_remote_log_metadata(None, None)


def _metadata_rows() -> list[dict]:
    return [{**decode_remote_log_metadata(None, v), "offset": i, "log_partition": 0, "cluster_id": "c"}
            for i, v in enumerate(_capture_values())]


def test_remote_segments_are_matched_to_their_metadata_by_id():
    rows = _metadata_rows()
    readable = readable_segment_ids(rows)
    plan = make_plan([str(CAPTURE)])
    remote = [f for f in plan.files if f.dir_status == remote_store.REMOTE]
    logs = {remote_store.segment_id_of(f.path): f for f in remote if f.kind == "segment"}
    # every segment the metadata says was copied is in the store, named by its id and start offset
    starts = {r["segment_id"]: r["start_offset"] for r in rows if r["api_key"] == 0}
    assert readable and set(logs) == readable == set(starts)
    for sid, f in logs.items():
        assert f.base_offset == starts[sid] and f.topic == "tiered"
        assert f.log_dir == str(BROKER) and f.broker_id == 1  # attached to the replica in the input
    # each segment has its full fileset (LocalTieredStorage: the txn index is optional)
    kinds = {(remote_store.segment_id_of(f.path), f.kind) for f in remote}
    for sid in logs:
        assert {(sid, k) for k in ("segment", "offset-index", "time-index", "remote-producer-snapshot",
                                   "remote-leader-epoch-checkpoint")} <= kinds
    # per partition: the remote extent ends where the local log starts (the broker deleted what it copied)
    steps = EXPECTED["steps"]["segments_at_shutdown"]
    ext = {(e[1], e[2]): e for e in extents(rows)}
    for key, seg in steps.items():
        topic, part = key.rsplit("-", 1)
        e = ext[(topic, int(part))]
        assert e[4] == 0 and e[5] == seg["local_segment_bases"][0] and e[6] == len(seg["remote_segment_bases"])


def test_live_log_keeps_remote_segments_below_the_local_log_start():
    def row(path, base, status="live", kind="segment", log_dir="/b1"):
        return {"path": path, "log_dir": log_dir, "topic": "t", "partition": 0, "dir_status": status, "kind": kind,
                "file_status": "live", "base_offset": base}

    a, b, c = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB", "CCCCCCCCCCCCCCCCCCCCCC"
    rows = [row("/b1/t-0/00000000000000000020.log", 20),
            row(f"/rs/t-0-{a}/00000000000000000000-{a}.log", 0, "remote"),
            row(f"/rs/t-0-{a}/00000000000000000010-{b}.log", 10, "remote"),
            row(f"/rs/t-0-{a}/00000000000000000020-{c}.log", 20, "remote"),
            {"path": "/b1/.kafka_cleanshutdown", "log_dir": "/b1", "topic": None, "partition": None,
             "kind": "clean-shutdown"}]
    lv = livelog.decide(rows, next_offsets={rows[1]["path"]: 10, rows[2]["path"]: 21})
    assert lv[rows[1]["path"]].live and not lv[rows[1]["path"]].bounded
    assert lv[rows[2]["path"]].live and lv[rows[2]["path"]].end_offset == 20  # overlaps the local log: cut there
    assert not lv[rows[3]["path"]].live  # a copy of what the replica holds locally
    # a segment the metadata does not list as COPY_SEGMENT_FINISHED is not part of the log
    lv = livelog.decide(rows, readable_remote_segments={b, c})
    assert not lv[rows[1]["path"]].live and "COPY_SEGMENT_FINISHED" in lv[rows[1]["path"]].reason


def test_two_copies_of_the_remote_store_are_read_once_per_replica():
    """Two dumps of one broker and its remote store, taken at different times and given together: each
    replica (log dir) reads each remote segment once -- the copy of its own dump -- not both copies."""
    def row(path, base, log_dir, status="live"):
        return {"path": path, "log_dir": log_dir, "topic": "t", "partition": 0, "dir_status": status, "kind": "segment",
                "file_status": "live", "base_offset": base}

    a = "AAAAAAAAAAAAAAAAAAAAAA"
    early, later = f"/d1/rs/t-0-{a}/00000000000000000000-{a}.log", f"/d2/rs/t-0-{a}/00000000000000000000-{a}.log"
    rows = [row("/d1/b1/t-0/00000000000000000020.log", 20, "/d1/b1"), row("/d2/b1/t-0/00000000000000000030.log", 30, "/d2/b1"),
            row(early, 0, "/d1/b1", "remote"), row(later, 0, "/d2/b1", "remote")]
    lv = livelog.decide(rows, next_offsets={early: 10, later: 10})
    per = {p: dict(lv[p].replicas) for p in (early, later)}
    assert per[early]["/d1/b1"].live and not per[early]["/d2/b1"].live
    assert per[later]["/d2/b1"].live and not per[later]["/d1/b1"].live
    assert later in per[early]["/d2/b1"].reason and a in per[early]["/d2/b1"].reason
    assert lv[early].live and lv[later].live  # each is live for the replica it is stored under
    # a copy that is the only one a replica can read stays: the other copy's segment is not readable there
    lv = livelog.decide(rows, next_offsets={early: 10, later: 10}, remote_outside_lineage={("/d2/b1", a): "outside"})
    assert not dict(lv[later].replicas)["/d2/b1"].live and not dict(lv[early].replicas)["/d2/b1"].live
    assert dict(lv[early].replicas)["/d1/b1"].live


# -- the audit, with and without the remote store (real Spark) ---------------------------------------

@pytest.fixture(scope="module")
def audits(spark, tmp_path_factory):
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest
    from auditor.engine.context import AuditContext

    out = {}
    for name, inputs in (("with", [str(BROKER), str(STORE)]), ("without", [str(BROKER)])):
        tables = tmp_path_factory.mktemp(f"tiered-{name}") / "tables"
        ing = ingest(spark, inputs, str(tables))
        res = audit(spark, str(tables))
        ctx = AuditContext(spark, str(tables))
        parts = {(r["topic"], r["partition"]): r.asDict() for r in ctx.partitions.where("topic = 'tiered'").collect()}
        txns = ctx.transactions.where("topic = 'tiered'").groupBy("partition", "marker_type").count().collect()
        out[name] = {"bad": ing.bad_files, "findings": res.findings, "lacks": ctx.coverage.lacking(),
                     "partitions": parts, "txns": {(r["partition"], r["marker_type"]): r["count"] for r in txns}}
    return out


def _expected_hanging() -> dict:
    [a] = EXPECTED["expect"]["anomalies"]
    return a


@pytest.mark.spark
@pytest.mark.parametrize("mode", ["with", "without"])
def test_the_hanging_transaction_and_nothing_else(audits, mode):
    a = _expected_hanging()
    got = audits[mode]
    assert not got["bad"]
    rules = sorted((f["rule"], f["topic"], f["partition"], f["producer_id"], f["first_offset"]) for f in got["findings"])
    assert rules == [("hanging-transaction", "tiered", 0, a["producer_id"], a["first_offset"]),
                     ("stuck-lso", "tiered", 0, a["producer_id"], a["first_offset"])], \
        [f["message"] for f in got["findings"]]
    hang = next(f for f in got["findings"] if f["rule"] == "hanging-transaction")
    assert hang["transactional_id"] == a["transactional_id"] and hang["severity"] == "critical"


@pytest.mark.spark
def test_a_second_copy_of_the_dump_changes_no_finding(spark, audits, tmp_path):
    """The capture and a copy of it (broker log dir and remote store, as two dumps of one broker given
    together): the same findings, each shown by both copies' log dirs. Before, every remote batch was in
    each replica's log twice (one per copy of the store): 135 critical duplicate-sequence findings."""
    import shutil

    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    copy = tmp_path / "later"
    shutil.copytree(CAPTURE, copy)
    tables = tmp_path / "tables"
    ingest(spark, [str(BROKER), str(STORE), str(copy / BROKER.name), str(copy / STORE.name)], str(tables))
    res = audit(spark, str(tables))

    def keys(findings):
        return sorted((f["rule"], f["kind"], f.get("topic"), f.get("partition"), f.get("producer_id"),
                       f.get("first_offset")) for f in findings)

    assert keys(res.findings) == keys(audits["with"]["findings"]) and res.findings
    for f in res.findings:
        if f.get("topic") == "tiered":
            assert {r["log_dir"] for r in f["replicas"]} == {str(BROKER), str(copy / BROKER.name)}, f["message"]


@pytest.mark.spark
def test_with_the_remote_store_the_whole_log_is_replayed(audits):
    got = audits["with"]
    exp_end = EXPECTED["expect"]["end_offsets_before_shutdown"]
    for p in (0, 1):
        r = got["partitions"][("tiered", p)]
        assert r["first_batch_offset"] == 0 and r["log_start_offset"] == 0 and r["remote_given"]
        assert not r["remote_not_given"] and r["log_end_offset"] == exp_end[f"tiered-{p}"]["high_watermark"]
        counts = EXPECTED["expect"]["counts"][f"tiered-{p}"]
        assert got["txns"].get((p, "COMMIT"), 0) == counts["committed"]
        assert got["txns"].get((p, "ABORT"), 0) == counts["aborted"]
    assert not any("remote storage" in line for line in got["lacks"])


@pytest.mark.spark
def test_without_the_remote_store_no_claim_about_the_remote_part(audits):
    got = audits["without"]
    steps = EXPECTED["steps"]["segments_at_shutdown"]
    r = got["partitions"][("tiered", 0)]
    local = steps["tiered-0"]["local_segment_bases"][0]
    assert r["first_batch_offset"] == local and r["local_log_start_offset"] == local
    assert r["partition_log_start_offset"] == 0 and r["remote_log_start_offset"] == 0 and r["remote_not_given"]
    assert r["remote_segments"] == len(steps["tiered-0"]["remote_segment_bases"])
    assert not any(f["rule"] in ("unknown-producer-gap", "torn-transaction") for f in got["findings"])
    lacks = [line for line in got["lacks"] if "remote storage" in line]
    assert any(line.startswith(f"tiered-0 (broker 1): offsets 0..{local - 1} are in remote storage") for line in lacks)


# -- producer snapshots of remote segments; the leader-epoch lineage ------------------------------

def test_remote_producer_snapshots_decode_with_their_segment_and_offset():
    """Every remote segment's producer snapshot decodes through the producer_snapshots table, tagged
    with its segment id; its offset is the segment's end + 1 (RLMCopyTask.copyLogSegment uploads
    fetchSnapshot(next segment base)). The broker uploads a copy of its own snapshot file: where
    the local one still exists (tiered-0 at 39, tiered-1 at 84), the rows are equal."""
    from auditor.model.remote import snapshot_offsets

    offsets = snapshot_offsets(_metadata_rows())
    plan = make_plan([str(CAPTURE)])
    snaps = [f for f in plan.files if f.kind == "remote-producer-snapshot"]
    assert len(snaps) == 10 and all(f.log_dir == str(BROKER) for f in snaps)
    strip = ("file", "snapshot_offset", "remote_segment_id", "cluster_id", "broker_id", "log_dir", "topic", "partition")
    compared = 0
    for f in snaps:
        task = {"path": f.path, "kind": f.kind, "topic": f.topic, "partition": f.partition, "size": f.size,
                "base_offset": f.base_offset, "log_dir": f.log_dir}
        rows = list(iter_rows(TABLES["producer_snapshots"], task))
        sid = remote_store.segment_id_of(f.path)
        assert rows and all(r.get("_problem_kind") is None and r["remote_segment_id"] == sid
                            and r["snapshot_offset"] is None for r in rows)
        local = BROKER / f"{f.topic}-{f.partition}" / f"{offsets[sid]:020d}.snapshot"
        if local.exists():
            ltask = {**task, "path": str(local), "kind": "producer-snapshot", "base_offset": offsets[sid],
                     "size": local.stat().st_size}
            lrows = list(iter_rows(TABLES["producer_snapshots"], ltask))
            assert [{k: v for k, v in r.items() if k not in strip} for r in lrows] == \
                [{k: v for k, v in r.items() if k not in strip} for r in rows]
            assert all(r.get("remote_segment_id") is None and r["snapshot_offset"] == offsets[sid] for r in lrows)
            compared += 1
    assert compared == 2
    # the snapshot offsets are where the next segment starts: the next remote one, or the local log
    steps = EXPECTED["steps"]["segments_at_shutdown"]
    for key, seg in steps.items():
        topic, part = key.rsplit("-", 1)
        bases = seg["remote_segment_bases"] + [seg["local_segment_bases"][0]]
        got = sorted(offsets[remote_store.segment_id_of(f.path)] for f in snaps if (f.topic, f.partition) == (topic, int(part)))
        assert got == bases[1:]


def _lineage_cases(n: int, seed: int = 28) -> list[tuple[dict, int, int, dict]]:
    """Random segments and lineages around one another: shared, shifted, truncated and diverged epochs."""
    import random

    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        lineage, off = {}, rnd.randint(0, 3)
        for e in sorted(rnd.sample(range(0, 8), rnd.randint(1, 5))):
            lineage[e] = off
            off += rnd.choice([0, 0, 1, 3, 7])  # some epochs hold no record
        keys = sorted(lineage)
        pick = keys[rnd.randint(0, len(keys) - 1):][:rnd.randint(1, 3)]
        seg = {e: lineage[e] + rnd.choice([0, 0, 0, -1, 1, 2]) for e in pick}
        if rnd.random() < 0.2:
            seg[rnd.randint(0, 9)] = rnd.randint(0, 20)  # an epoch the lineage may not have
        seg = {e: max(o, 0) for e, o in seg.items()}
        start = min(seg.values())
        end = max(seg.values()) + rnd.randint(0, 8)
        log_end = max(off, end) + rnd.choice([-3, 0, 1, 5])
        out.append((seg, max(end, start), log_end, lineage))
    return out


@pytest.mark.spark  # runs Kafka's Java code
def test_lineage_check_is_kafkas():
    """auditor.model.remote.within_leader_epochs against Kafka 4.3.1's own
    RemoteLogManager.isRemoteSegmentWithinLeaderEpochs (with buildFilteredLeaderEpochMap on the
    replica's epochs, as its callers do), on 600 random segment/lineage pairs."""
    from auditor.model.remote import within_leader_epochs

    def fmt(m):
        return ",".join(f"{e}:{o}" for e, o in sorted(m.items()))

    cases = _lineage_cases(600)
    tool = PROJECT / "scripts" / "kafka" / "java" / "RemoteLineageTool.java"
    r = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classpath(NEWEST),
                        str(tool)], input="\n".join(f"{fmt(s)};{e};{le};{fmt(lin)}" for s, e, le, lin in cases).encode(),
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    kafka = [line == "true" for line in r.stdout.decode().split()]
    assert len(kafka) == len(cases)
    ours = [within_leader_epochs(s, e, le, lin) for s, e, le, lin in cases]
    diff = [(c, k) for c, k, o in zip(cases, kafka, ours) if k != o]
    assert not diff, diff[:5]
    assert 50 < sum(kafka) < len(kafka) - 50  # both answers are exercised


def test_capture_segments_are_within_the_lineage_and_a_diverged_one_is_not_part_of_the_log():
    """The capture's remote segments (epoch 0) lie within broker-1's leader-epoch checkpoints; the
    same segments against a lineage whose first epoch is 1 (epoch 0 truncated away) are outside it,
    and the live log leaves them out with the reason."""
    from auditor.model.remote import outside_lineage, replica_lineages

    rows = _metadata_rows()
    plan = make_plan([str(CAPTURE)])
    files = [{"path": f.path, "log_dir": f.log_dir, "topic": f.topic, "partition": f.partition, "kind": f.kind,
              "dir_status": f.dir_status, "file_status": f.file_status, "base_offset": f.base_offset,
              "next_offset": None} for f in plan.files]
    epochs = [{"log_dir": str(BROKER), "topic": "tiered", "partition": p, "leader_epoch": 0, "start_offset": 0} for p in (0, 1)]
    lineage_of, log_end_of = replica_lineages(files, epochs)
    assert set(lineage_of) == readable_segment_ids(rows)
    assert outside_lineage(rows, lineage_of, log_end_of) == {}
    diverged = [{**e, "leader_epoch": 1} for e in epochs]
    out = outside_lineage(rows, *replica_lineages(files, diverged))
    assert set(out) == readable_segment_ids(rows)
    lv = livelog.decide(files, readable_remote_segments=readable_segment_ids(rows), remote_outside_lineage=out)
    remote_logs = [f["path"] for f in files if f["dir_status"] == "remote" and f["kind"] == "segment"]
    assert remote_logs and all(not lv[p].live and "leader-epoch lineage" in lv[p].reason for p in remote_logs)
    local = [f["path"] for f in files if f["dir_status"] == "live" and f["kind"] == "segment" and f["topic"] == "tiered"]
    assert local and all(lv[p].live for p in local)


def _copy_without(src: Path, dst: Path, drop) -> None:
    shutil.copytree(src, dst, ignore=lambda d, names: [n for n in names if drop(Path(d) / n)])


@pytest.mark.spark
def test_remote_producer_snapshots_seed_the_state_below_the_local_log(spark, tmp_path):
    """A replica whose own producer snapshots are not in the input, and the remote store without its
    segments (snapshots, indexes, epoch checkpoints only): the producers' first local batches
    continue sequences begun in remote storage. With the remote snapshots the broker's state at the
    local log start is known (TierStateMachine.buildRemoteLogAuxState loads the snapshot of the
    segment ending there): no unknown-producer-gap. Without them: only the info that the earlier
    batches are remote."""
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    broker = tmp_path / "broker-1"
    _copy_without(BROKER, broker, lambda p: p.parent.name.startswith("tiered-") and p.suffix == ".snapshot")
    store = tmp_path / "remote-store"
    _copy_without(STORE, store, lambda p: p.suffix == ".log")
    nometa = tmp_path / "nometa" / "broker-1"  # a broker hosting no __remote_log_metadata replica
    _copy_without(broker, nometa, lambda p: p.name.startswith("__remote_log_metadata-"))
    found = {}
    for name, inputs in (("snapshots", [str(broker), str(store)]), ("none", [str(broker)]), ("nometa", [str(nometa)])):
        ingest(spark, inputs, str(tmp_path / name))
        found[name] = audit(spark, str(tmp_path / name)).findings
    gaps = [f for f in found["none"] if f["rule"] == "unknown-producer-gap"]
    assert gaps and {(f["kind"], f["severity"]) for f in gaps} == {("earlier-batches-remote", "info")}
    assert {(f["partition"], f["producer_id"]) for f in gaps} == {(0, 1), (0, 2)}  # tiered-1 holds no local batch
    # without __remote_log_metadata the replica's own checkpoints show the log is tiered (its
    # log-start-offset and leader-epoch checkpoints start below its local log): the same info, no
    # retention or loss claim
    nm = [f for f in found["nometa"] if f["rule"] == "unknown-producer-gap"]
    assert {(f["partition"], f["producer_id"]) for f in nm} == {(f["partition"], f["producer_id"]) for f in gaps}
    assert {(f["kind"], f["severity"], f["evidence"]["remote_log_start_offset"]) for f in nm} == {
        ("earlier-batches-tiered", "info", 0)}
    assert not [f["message"] for f in found["snapshots"] if f["rule"] == "unknown-producer-gap"]
    assert not [f["message"] for f in found["snapshots"] if f["severity"] in ("error", "critical")
                and f["rule"] not in ("hanging-transaction", "stuck-lso")]


# -- replication factor 3: the remote log is every replica's ------------------------------------------

REPLICATED = SAMPLE_LOGS / "tiered-storage-replicated"
REPLICATED_EXPECTED = json.loads((REPLICATED / "expected.json").read_text())
REPLICATED_BROKERS = sorted(REPLICATED.glob("broker-*"))


def test_remote_files_are_in_the_log_of_every_replica_each_below_its_own_local_start():
    """Two replicas of t-0 with different local log starts (a follower deletes its local copies on
    its own schedule): each keeps of the shared remote files what lies below *its* local start; a
    (log dir, segment id) lineage verdict removes a segment from that replica's log only."""
    def row(path, base, log_dir, status="live"):
        return {"path": path, "log_dir": log_dir, "topic": "t", "partition": 0, "dir_status": status, "kind": "segment",
                "file_status": "live", "base_offset": base}

    a, b = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"
    r0, r10 = f"/rs/t-0-{a}/00000000000000000000-{a}.log", f"/rs/t-0-{a}/00000000000000000010-{b}.log"
    rows = [row("/b1/t-0/00000000000000000020.log", 20, "/b1"), row("/b2/t-0/00000000000000000010.log", 10, "/b2"),
            row(r0, 0, "/b1", "remote"), row(r10, 10, "/b1", "remote")]
    lv = livelog.decide(rows, next_offsets={r0: 10, r10: 20})
    per = {p: dict(lv[p].replicas) for p in (r0, r10)}
    assert set(per[r0]) == set(per[r10]) == {"/b1", "/b2"}
    assert per[r0]["/b1"].live and per[r0]["/b2"].live
    assert per[r10]["/b1"].live and not per[r10]["/b2"].live  # /b2 holds 10.. locally
    assert lv[r10].live  # the file's own verdict is that of the replica it is stored under (/b1)
    lv = livelog.decide(rows, next_offsets={r0: 10, r10: 20}, remote_outside_lineage={("/b2", a): "outside"})
    assert dict(lv[r0].replicas)["/b1"].live and not dict(lv[r0].replicas)["/b2"].live


@pytest.fixture(scope="module")
def replicated(spark, tmp_path_factory):
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest
    from auditor.engine.context import AuditContext
    from pyspark.sql import functions as F

    out = {}
    brokers = [str(b) for b in REPLICATED_BROKERS]
    for name, inputs in (("with", brokers + [str(REPLICATED / "remote-store")]), ("without", brokers)):
        tables = tmp_path_factory.mktemp(f"tiered-rf3-{name}") / "tables"
        ing = ingest(spark, inputs, str(tables))
        res = audit(spark, str(tables))
        ctx = AuditContext(spark, str(tables))
        parts = {r["broker_id"]: r.asDict() for r in ctx.partitions.where("topic = 'tiered'").collect()}
        b = ctx.table("batches").where("topic = 'tiered' AND source = 'segment'")
        offsets = {r["broker_id"]: sorted({o for lo, hi in r["spans"] for o in range(lo, hi + 1)})
                   for r in b.groupBy("broker_id").agg(F.collect_list(F.array("base_offset", "last_offset"))
                                                       .alias("spans")).collect()}
        markers = {(r["broker_id"], r["marker_type"]): r["count"] for r in
                   ctx.transactions.where("topic = 'tiered'").groupBy("broker_id", "marker_type").count().collect()}
        out[name] = {"bad": ing.bad_files, "findings": res.findings, "lacks": ctx.coverage.lacking(),
                     "partitions": parts, "offsets": offsets, "markers": markers}
    return out


@pytest.mark.spark
def test_with_the_remote_store_every_replica_reads_the_remote_log(replicated):
    """RemoteLogManager.read serves offsets below the local log start on whichever replica the
    fetch reaches (Kafka 4.3.1): with the store given, the live log of each of the three replicas
    covers every offset from 0 to the high watermark, and each replays all the clients' transactions."""
    got = replicated["with"]
    hw = REPLICATED_EXPECTED["expect"]["end_offsets_before_shutdown"]["tiered-0"]["high_watermark"]
    local = REPLICATED_EXPECTED["steps"]["segments_at_shutdown"]["local_segment_bases"]
    counts = REPLICATED_EXPECTED["expect"]["counts"]["tiered-0"]
    assert not got["bad"] and not got["findings"], [f["message"] for f in got["findings"]]
    assert sorted(got["partitions"]) == sorted(got["offsets"]) == [1, 2, 3]
    for broker, offsets in got["offsets"].items():
        assert min(local[str(broker)]) > 0  # every replica's first segments are remote only
        assert offsets == list(range(hw)), broker
        r = got["partitions"][broker]
        assert r["first_batch_offset"] == 0 and r["log_end_offset"] == hw and r["remote_given"]
        assert not r["remote_not_given"] and r["local_log_start_offset"] == min(local[str(broker)])
        assert got["markers"].get((broker, "COMMIT"), 0) == counts["committed"]
        assert got["markers"].get((broker, "ABORT"), 0) == counts["aborted"]
    assert not any("remote storage" in line for line in got["lacks"])


@pytest.mark.spark
def test_without_the_remote_store_each_replica_says_its_remote_part_is_missing(replicated):
    got = replicated["without"]
    local = REPLICATED_EXPECTED["steps"]["segments_at_shutdown"]["local_segment_bases"]
    assert not got["bad"] and not got["findings"], [f["message"] for f in got["findings"]]
    for broker, r in got["partitions"].items():
        start = min(local[str(broker)])
        assert r["first_batch_offset"] == start and r["remote_not_given"] and r["remote_log_start_offset"] == 0
        assert any(line.startswith(f"tiered-0 (broker {broker}): offsets 0..{start - 1} are in remote storage")
                   for line in got["lacks"])


def test_remote_files_join_the_replicas_of_their_own_topic_id():
    """Two captures with a topic `tiered` (different clusters, different topic ids) scanned together:
    each store's files are stored under a replica of its own capture (the remote directory's topic
    id equals the replica's partition.metadata: the broker keys remote data by TopicIdPartition)."""
    plan = make_plan([str(CAPTURE), str(REPLICATED)])
    remote = [f for f in plan.files if f.dir_status == remote_store.REMOTE]
    assert remote and all(f.log_dir is not None for f in remote)
    for f in remote:
        own = REPLICATED if str(REPLICATED) + os.sep in f.path else CAPTURE
        assert Path(f.log_dir).parent == own, (f.path, f.log_dir)
