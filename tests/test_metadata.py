"""Tests for auditor.formats.metadata (KRaft __cluster_metadata records).

Ground truth, none of it taken from this decoder's own output:
* bytes assembled here by hand (struct + uvarint) following docs/on-disk-format.md §5.1 and
  the Kafka schemas (metadata/src/main/resources/common/metadata/*.json);
* the real KRaft log dirs listed in real_logs/SOURCES.md, checked against
  files Kafka wrote *independently* of the metadata log: ``partition.metadata``
  (topic ids), ``meta.properties`` (node.id, directory.id), ``quorum-state``
  (leader id / epoch), producer-state ``.snapshot`` files (producer ids in
  use), directory names (topics, Kafka version), and the batch/snapshot
  counts stated in SOURCES.md.
"""

from __future__ import annotations

import collections
import functools
import json
import re
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from auditor.errors import DecodeError
from auditor.formats.batch import BatchHeader, iter_segment, read_payload
from auditor.formats.metadata import (
    COLUMNS,
    PID_BLOCK_COLUMNS,
    decode_kraft_control_value,
    decode_metadata_value,
    is_metadata_snapshot_name,
    parse_snapshot_name,
    producer_id_block,
)
from auditor.formats.records import decode_control, iter_records
from builders import carr_i32, cstr, uvarint
from conftest import REAL_LOGS

DANIEL = REAL_LOGS / "Danielowo2000__BigDataTechnologies-Version-2"
DANIEL_350 = DANIEL / "kafka_2.13-3.5.0" / "kraft-combined-logs"
DANIEL_KSQL = DANIEL / "kafka_data"
NILOUFAR = REAL_LOGS / "Niloufar1171__LDI-POC"
JEONG = REAL_LOGS / "Jeong-Rae__KafkaDemo" / "kraft-combined-logs"
LESTFEED = REAL_LOGS / "LestFeeD__online-shop-user" / "kafka" / "data"
RONEM = REAL_LOGS / "ronem123__rupia-transaction-service" / "kafka-logs"
JY = REAL_LOGS / "JY-GIEGIEGIE__Stock-Sys-Integration" / "kafka-logs"
ITUMELENG = REAL_LOGS / "ItumelengMogase__Real-Time-Data-Pipeline-for-Patient-Admissions" / "kafka-data"
DUONG = REAL_LOGS / "duongnvt2110__ms-practice" / "kraft-combined-logs"
MD = "__cluster_metadata-0"
SEG0 = "00000000000000000000.log"

# Uuid(0, 1), the fixed topic id of __cluster_metadata (docs/on-disk-format.md §5.1)
META_TOPIC_UUID = bytes(15) + b"\x01"
META_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"




# ---------------------------------------------------------------- byte helpers
# uvarint, cstr (compact string) and carr_i32 (compact int32 array) come from tests/builders.py
def tagged(*fields: tuple[int, bytes]) -> bytes:
    out = uvarint(len(fields))
    for tag, body in fields:
        out += uvarint(tag) + uvarint(len(body)) + body
    return out


def frame(api_key: int, version: int, body: bytes, frame_version: int = 1) -> bytes:
    return uvarint(frame_version) + uvarint(api_key) + uvarint(version) + body


def producer_ids_value(broker_id: int, broker_epoch: int, next_pid: int) -> bytes:
    return b"\x01\x0f\x00" + struct.pack(">iqq", broker_id, broker_epoch, next_pid) + b"\x00"


def partition_change_value(version: int, *tags: tuple[int, bytes]) -> bytes:
    body = struct.pack(">i", 3) + META_TOPIC_UUID + tagged(*tags)
    return frame(5, version, body)


def register_broker_v3() -> bytes:
    body = (
        struct.pack(">i", 7)                      # BrokerId
        + b"\x00"                                 # IsMigratingZkBroker (v2+)
        + bytes(range(16))                        # IncarnationId
        + struct.pack(">q", 42)                   # BrokerEpoch
        + uvarint(2)                              # EndPoints: 1 element
        + cstr("PLAINTEXT") + cstr("kafka") + struct.pack(">Hh", 9092, 0) + b"\x00"
        + uvarint(2)                              # Features: 1 element
        + cstr("metadata.version") + struct.pack(">hh", 1, 19) + b"\x00"
        + cstr(None)                              # Rack
        + b"\x01"                                 # Fenced
        + b"\x00"                                 # InControlledShutdown (v1+)
        + tagged((0, uvarint(2) + META_TOPIC_UUID))  # LogDirs, tag 0 (v3+)
    )
    return frame(0, 3, body)


# ---------------------------------------------------------------- hand-built records
def test_producer_ids_record_24_bytes():
    value = producer_ids_value(1, 5, 2000)
    assert len(value) == 24  # docs/on-disk-format.md §5.1: 01 0F 00 + 4+8+8 + 00
    row = decode_metadata_value(value)
    assert set(row) == {f.name for f in COLUMNS}
    assert row["frame_version"] == 1
    assert row["api_key"] == 15
    assert row["record_type"] == "PRODUCER_IDS_RECORD"
    assert row["record_version"] == 0
    assert json.loads(row["data_json"]) == {"brokerId": 1, "brokerEpoch": 5, "nextProducerId": 2000}
    assert row["data_json"] == '{"brokerId":1,"brokerEpoch":5,"nextProducerId":2000}'  # field order kept
    assert (row["broker_id"], row["broker_epoch"], row["next_producer_id"]) == (1, 5, 2000)
    assert row["unknown_tags_json"] is None
    assert row["topic_name"] is None and row["replicas"] is None


def test_producer_id_block():
    row = decode_metadata_value(producer_ids_value(3, 9, 5000))
    block = producer_id_block(row)
    assert block == {"broker_id": 3, "broker_epoch": 9, "next_producer_id": 5000,
                     "block_start": 4000, "block_end": 4999}
    assert set(block) == {f.name for f in PID_BLOCK_COLUMNS}
    # snapshot image record: brokerId/epoch -1, block is still the newest grant
    img = producer_id_block(decode_metadata_value(producer_ids_value(-1, -1, 1000)))
    assert (img["broker_id"], img["block_start"], img["block_end"]) == (-1, 0, 999)
    topic = frame(2, 0, cstr("t") + META_TOPIC_UUID + b"\x00")
    assert producer_id_block(decode_metadata_value(topic)) is None
    assert producer_id_block(decode_metadata_value(producer_ids_value(1, 1, 999))) is None


def test_topic_and_remove_topic_record():
    row = decode_metadata_value(frame(2, 0, cstr("orders") + META_TOPIC_UUID + b"\x00"))
    assert row["record_type"] == "TOPIC_RECORD"
    assert (row["topic_name"], row["topic_id"]) == ("orders", META_TOPIC_ID)
    assert json.loads(row["data_json"]) == {"name": "orders", "topicId": META_TOPIC_ID}
    row = decode_metadata_value(frame(9, 0, META_TOPIC_UUID + b"\x00"))
    assert row["record_type"] == "REMOVE_TOPIC_RECORD"
    assert row["topic_id"] == META_TOPIC_ID and row["topic_name"] is None


def test_partition_change_tagged_leader_and_isr():
    value = partition_change_value(0, (0, carr_i32([1, 2])), (1, struct.pack(">i", 2)))
    row = decode_metadata_value(value)
    assert row["record_type"] == "PARTITION_CHANGE_RECORD"
    assert json.loads(row["data_json"]) == {
        "partitionId": 3, "topicId": META_TOPIC_ID, "isr": [1, 2], "leader": 2}
    assert (row["partition_id"], row["leader"], row["isr"], row["replicas"]) == (3, 2, [1, 2], None)
    assert row["unknown_tags_json"] is None


def test_partition_change_without_tags_means_unchanged():
    row = decode_metadata_value(partition_change_value(2))
    # Kafka's JSON converter omits tagged fields at their default
    assert json.loads(row["data_json"]) == {"partitionId": 3, "topicId": META_TOPIC_ID}
    assert row["leader"] is None and row["isr"] is None  # -2 / null = unchanged
    # leader -1 (no leader) is a change and must show
    row = decode_metadata_value(partition_change_value(0, (1, struct.pack(">i", -1))))
    assert row["leader"] == -1 and json.loads(row["data_json"])["leader"] == -1


def test_partition_change_unknown_tag_kept():
    value = partition_change_value(2, (1, struct.pack(">i", 4)), (9, b"\xab\xcd"))
    row = decode_metadata_value(value)
    assert json.loads(row["unknown_tags_json"]) == {"9": "abcd"}
    assert json.loads(row["data_json"]) == {"partitionId": 3, "topicId": META_TOPIC_ID, "leader": 4}
    # Directories (tag 8) only exists from v1: at v0 it is an unknown tag
    dirs = uvarint(2) + META_TOPIC_UUID
    row0 = decode_metadata_value(partition_change_value(0, (8, dirs)))
    assert json.loads(row0["unknown_tags_json"]) == {"8": dirs.hex()}
    row1 = decode_metadata_value(partition_change_value(1, (8, dirs)))
    assert json.loads(row1["data_json"])["directories"] == [META_TOPIC_ID]
    assert row1["unknown_tags_json"] is None


def test_partition_record_v0_and_v1():
    common = (struct.pack(">i", 0) + META_TOPIC_UUID + carr_i32([1, 2, 3]) + carr_i32([1, 3])
              + carr_i32([]) + carr_i32([]) + struct.pack(">iii", 3, 7, 9))
    row = decode_metadata_value(frame(3, 0, common + b"\x00"))
    assert json.loads(row["data_json"]) == {
        "partitionId": 0, "topicId": META_TOPIC_ID, "replicas": [1, 2, 3], "isr": [1, 3],
        "removingReplicas": [], "addingReplicas": [], "leader": 3, "leaderEpoch": 7, "partitionEpoch": 9}
    assert (row["leader"], row["leader_epoch"], row["replicas"], row["isr"]) == (3, 7, [1, 2, 3], [1, 3])
    # v1 adds Directories after PartitionEpoch; tagged LeaderRecoveryState=1 shows (default is 0)
    v1 = common + uvarint(2) + META_TOPIC_UUID + tagged((0, b"\x01"))
    d = json.loads(decode_metadata_value(frame(3, 1, v1))["data_json"])
    assert d["directories"] == [META_TOPIC_ID] and d["leaderRecoveryState"] == 1
    assert list(d)[-2:] == ["partitionEpoch", "directories"]


def test_register_broker_v3():
    row = decode_metadata_value(register_broker_v3())
    assert row["record_type"] == "REGISTER_BROKER_RECORD" and row["record_version"] == 3
    d = json.loads(row["data_json"])
    assert d == {
        "brokerId": 7, "isMigratingZkBroker": False, "incarnationId": "AAECAwQFBgcICQoLDA0ODw",
        "brokerEpoch": 42,
        "endPoints": [{"name": "PLAINTEXT", "host": "kafka", "port": 9092, "securityProtocol": 0}],
        "features": [{"name": "metadata.version", "minSupportedVersion": 1, "maxSupportedVersion": 19}],
        "rack": None, "fenced": True, "inControlledShutdown": False, "logDirs": [META_TOPIC_ID]}
    assert (row["broker_id"], row["broker_epoch"]) == (7, 42)


def test_feature_level_and_config_records():
    row = decode_metadata_value(frame(12, 0, cstr("transaction.version") + struct.pack(">h", 2) + b"\x00"))
    assert row["record_type"] == "FEATURE_LEVEL_RECORD"
    assert (row["feature_name"], row["feature_level"]) == ("transaction.version", 2)
    body = struct.pack(">b", 2) + cstr("orders") + cstr("cleanup.policy") + cstr("compact") + b"\x00"
    row = decode_metadata_value(frame(4, 0, body))
    assert row["record_type"] == "CONFIG_RECORD"
    assert (row["config_resource_type"], row["config_resource_name"], row["config_name"],
            row["config_value"]) == (2, "orders", "cleanup.policy", "compact")
    # a null value (config deleted) stays null and is printed as JSON null
    body = struct.pack(">b", 4) + cstr("1") + cstr("log.retention.ms") + cstr(None) + b"\x00"
    row = decode_metadata_value(frame(4, 0, body))
    assert row["config_value"] is None and json.loads(row["data_json"])["value"] is None


def test_unknown_keys_and_versions_are_counted_not_errors():
    row = decode_metadata_value(frame(99, 0, b"\xde\xad"))
    assert (row["api_key"], row["record_type"], row["record_version"], row["data_json"]) == (
        99, "UNKNOWN(99)", 0, None)
    # ClientQuotaRecord (14) is a known type without a schema here
    row = decode_metadata_value(frame(14, 0, b"\x00\x00"))
    assert row["record_type"] == "CLIENT_QUOTA_RECORD" and row["data_json"] is None
    # PartitionRecord v3 is not known: named, not decoded
    row = decode_metadata_value(frame(3, 3, b"\x00"))
    assert (row["record_type"], row["record_version"], row["data_json"]) == ("PARTITION_RECORD", 3, None)


def test_frame_version_0_rejected():
    value = b"\x00" + producer_ids_value(1, 1, 1000)[1:]
    with pytest.raises(DecodeError) as exc:
        decode_metadata_value(value)
    assert exc.value.kind == "unknown-version" and exc.value.position == 0
    with pytest.raises(DecodeError) as exc:
        decode_metadata_value(b"\x02" + producer_ids_value(1, 1, 1000)[1:])
    assert exc.value.kind == "unknown-version"


def test_trailing_bytes_rejected():
    with pytest.raises(DecodeError) as exc:
        decode_metadata_value(producer_ids_value(1, 1, 1000) + b"\x00")
    assert exc.value.position == 24 and exc.value.kind == "corrupt"


@pytest.mark.parametrize("value", [
    producer_ids_value(1, 5, 2000),
    partition_change_value(2, (0, carr_i32([1, 2])), (1, struct.pack(">i", 2))),
    register_broker_v3(),
    frame(2, 0, cstr("orders") + META_TOPIC_UUID + b"\x00"),
])
def test_truncation_at_every_byte(value):
    decode_metadata_value(value)  # the whole value is fine
    for n in range(len(value)):
        with pytest.raises(DecodeError):
            decode_metadata_value(value[:n])


def test_api_key_must_fit_int16():
    with pytest.raises(DecodeError):
        decode_metadata_value(uvarint(1) + uvarint(40000) + uvarint(0))


# ---------------------------------------------------------------- KRaft control values
def test_snapshot_header_footer_values():
    hdr = struct.pack(">hq", 0, 1692183995605) + b"\x00"
    assert decode_kraft_control_value(3, hdr) == {"version": 0, "lastContainedLogTimestamp": 1692183995605}
    assert decode_kraft_control_value(4, b"\x00\x00\x00") == {"version": 0}
    with pytest.raises(DecodeError):
        decode_kraft_control_value(3, hdr[:-1])
    with pytest.raises(DecodeError):
        decode_kraft_control_value(3, hdr + b"\x00")


def test_leader_change_kraft_version_voters_values():
    lc = struct.pack(">hi", 0, 2) + uvarint(3) + b"".join(struct.pack(">i", v) + b"\x00" for v in (1, 2)) \
        + uvarint(2) + struct.pack(">i", 2) + b"\x00" + b"\x00"
    assert decode_kraft_control_value(2, lc) == {
        "version": 0, "leaderId": 2, "voters": [{"voterId": 1}, {"voterId": 2}],
        "grantingVoters": [{"voterId": 2}]}
    assert decode_kraft_control_value(5, struct.pack(">hh", 0, 1) + b"\x00") == {"version": 0, "kRaftVersion": 1}
    voters = (struct.pack(">h", 0) + uvarint(2) + struct.pack(">i", 1) + META_TOPIC_UUID
              + uvarint(2) + cstr("CONTROLLER") + cstr("localhost") + struct.pack(">H", 9093) + b"\x00"
              + struct.pack(">hh", 0, 1) + b"\x00"   # KRaftVersionFeature struct + its tags
              + b"\x00"                               # voter tags
              + b"\x00")                              # record tags
    assert decode_kraft_control_value(6, voters) == {"version": 0, "voters": [{
        "voterId": 1, "voterUuid": META_TOPIC_ID,
        "endpoints": [{"name": "CONTROLLER", "host": "localhost", "port": 9093}],
        "kRaftVersionFeature": {"minSupportedVersion": 0, "maxSupportedVersion": 1}}]}
    assert decode_kraft_control_value(0, struct.pack(">hi", 0, 5)) == {}  # txn marker: not KRaft
    assert decode_kraft_control_value(77, b"") == {}


# ---------------------------------------------------------------- snapshot names
def test_parse_snapshot_name():
    assert parse_snapshot_name("00000000000000017073-0000000004.checkpoint") == (17073, 4)
    assert parse_snapshot_name("00000000000001734780-0000000001.checkpoint") == (1734780, 1)
    assert parse_snapshot_name("bootstrap.checkpoint") is None
    assert is_metadata_snapshot_name("bootstrap.checkpoint")
    assert is_metadata_snapshot_name("00000000000000017073-0000000004.checkpoint")
    for bad in ("00000000000000017073-0000000004.checkpoint.part",
                "00000000000000017073-0000000004.checkpoint.deleted",
                "0000000000000017073-0000000004.checkpoint",      # 19 digits
                "00000000000000017073-000000004.checkpoint",      # 9 digits
                "00000000000000017073.log", "replication-offset-checkpoint",
                "00000000000000017073-9999999999.checkpoint"):    # epoch beyond int32
        assert parse_snapshot_name(bad) is None
        assert not is_metadata_snapshot_name(bad)


# ---------------------------------------------------------------- hypothesis
@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_decode_error(data):
    for fn in (decode_metadata_value,):
        try:
            fn(data)
        except DecodeError:
            pass
    for t in range(0, 8):
        try:
            decode_kraft_control_value(t, data)
        except DecodeError:
            pass


_KNOWN_KEYS = [0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 17, 20, 21, 23, 24, 25, 27]


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(_KNOWN_KEYS), st.integers(0, 3), st.binary(max_size=120))
def test_known_schemas_random_bodies_only_decode_error(key, version, body):
    try:
        row = decode_metadata_value(frame(key, version, body))
    except DecodeError:
        return
    assert row["api_key"] == key
    if row["data_json"] is not None:
        json.loads(row["data_json"])


_SEEDS = [
    producer_ids_value(1, 5, 2000),
    partition_change_value(2, (0, carr_i32([1, 2])), (1, struct.pack(">i", 2))),
    register_broker_v3(),
]


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(_SEEDS), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=6),
       st.integers(0, 250))
def test_mutated_records_only_decode_error(seed, flips, cut):
    buf = bytearray(seed)
    for pos, val in flips:
        buf[pos % len(buf)] = val
    try:
        decode_metadata_value(bytes(buf[: max(cut, 0)] if cut < len(buf) else buf))
    except DecodeError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_snapshot_name_never_raises(name):
    r = parse_snapshot_name(name)
    assert r is None or (isinstance(r, tuple) and len(r) == 2)


# ---------------------------------------------------------------- real files
@functools.lru_cache(maxsize=None)
def _read(path: Path):
    """[(BatchHeader, [(offset, kind, decoded)])] where kind is the control type
    name for control records and 'data' (decoded = metadata row) otherwise."""
    out = []
    with open(path, "rb") as f:
        for h in iter_segment(f, file_size=path.stat().st_size):
            assert isinstance(h, BatchHeader), f"{path}: {h}"
            assert h.crc_valid, f"{path}: bad crc at {h.position}"
            recs = []
            for r in iter_records(h, read_payload(f, h)):
                if h.is_control:
                    c = decode_control(r.key, r.value)
                    recs.append((r.offset, c.control_type, decode_kraft_control_value(c.control_type_id, r.value)))
                else:
                    assert r.key is None and not r.headers  # docs/on-disk-format.md §5.1
                    recs.append((r.offset, "data", decode_metadata_value(r.value)))
            out.append((h, recs))
    return out


def _metadata_files() -> list[Path]:
    logs = sorted(REAL_LOGS.rglob(f"{MD}/*.log"))
    snaps = sorted(p for p in REAL_LOGS.rglob("*.checkpoint") if is_metadata_snapshot_name(p.name))
    return logs + snaps


def _data_rows(batches):
    return [row for h, recs in batches if not h.is_control for _, kind, row in recs]


@pytest.mark.real_logs
def test_every_real_metadata_record_decodes():
    files = _metadata_files()
    assert len(files) == 204  # 6 logs + 188 <offset>-<epoch> snapshots + 10 bootstrap.checkpoint
    by_key: collections.Counter = collections.Counter()
    controls: collections.Counter = collections.Counter()
    total = 0
    for p in files:
        for h, recs in _read(p):
            for _, kind, row in recs:
                total += 1
                if kind == "data":
                    by_key[row["api_key"]] += 1
                    # every key found in these files has a schema here
                    assert row["data_json"] is not None, (p, row)
                    assert row["unknown_tags_json"] is None, (p, row)
                    assert not row["record_type"].startswith("UNKNOWN")
                else:
                    controls[kind] += 1
    assert total > 100_000
    assert set(by_key) == {0, 2, 3, 4, 5, 12, 15, 17, 20, 21, 23, 24, 27}
    # metadata-transaction markers pair up (KIP-868 bootstrap records)
    assert by_key[23] == by_key[24]
    # every snapshot file has exactly one header and one footer
    assert controls["SNAPSHOT_HEADER"] == controls["SNAPSHOT_FOOTER"] == 198
    # control batches in the logs: SOURCES.md counts 5+1+5+1+22 in the five logs that have them
    assert controls["LEADER_CHANGE"] == 34


@pytest.mark.real_logs
def test_log_control_batches_are_leader_changes_matching_quorum_state():
    # SOURCES.md: number of control batches per log
    expected = {
        DANIEL_350 / MD / SEG0: 5, DANIEL_KSQL / MD / SEG0: 1, NILOUFAR / MD / SEG0: 1,
        JEONG / MD / SEG0: 5, LESTFEED / MD / "00000000000000116596.log": 22,
    }
    for path, n in expected.items():
        batches = _read(path)
        ctl = [(h, recs) for h, recs in batches if h.is_control]
        assert len(ctl) == n, path
        state = path.parent / "quorum-state"
        leader = json.loads(state.read_text())["leaderId"] if state.exists() else 1
        for h, recs in ctl:
            assert [k for _, k, _ in recs] == ["LEADER_CHANGE"]
            assert recs[0][2]["leaderId"] == leader
            # the raft epoch of the batch is the epoch the leader was elected in
            assert h.partition_leader_epoch >= 0
        # the last election is quorum-state's leaderEpoch
        if state.exists():
            assert ctl[-1][0].partition_leader_epoch == json.loads(state.read_text())["leaderEpoch"]
    assert len(_read(DANIEL_KSQL / MD / SEG0)) == 16210  # SOURCES.md batch counts
    assert len(_read(DANIEL_350 / MD / SEG0)) == 28511


@pytest.mark.real_logs
def test_snapshot_layout_header_data_footer():
    snaps = sorted(p for p in REAL_LOGS.rglob("*.checkpoint") if is_metadata_snapshot_name(p.name))
    assert len(snaps) == 198
    for p in snaps:
        batches = _read(p)
        # SOURCES.md: 3 batches each: control (header), data, control (footer)
        assert [h.is_control for h, _ in batches] == [True, False, True], p
        first = [k for _, k, _ in batches[0][1]]
        assert first[0] == "SNAPSHOT_HEADER"
        assert first in (["SNAPSHOT_HEADER"], ["SNAPSHOT_HEADER", "KRAFT_VERSION", "KRAFT_VOTERS"])
        assert [k for _, k, _ in batches[2][1]] == ["SNAPSHOT_FOOTER"]
        # offsets inside a snapshot run 0..n-1 without gaps
        offsets = [o for _, recs in batches for o, _, _ in recs]
        assert offsets == list(range(len(offsets)))
        sid = parse_snapshot_name(p.name)
        hdr = batches[0][1][0][2]
        if sid is None:  # bootstrap.checkpoint: never contained a log record
            assert hdr["lastContainedLogTimestamp"] == 0
            assert all(h.partition_leader_epoch == 0 for h, _ in batches)
        else:
            assert hdr["lastContainedLogTimestamp"] > 1_600_000_000_000
            # the epoch in the file name is the raft epoch stamped on its batches
            assert all(h.partition_leader_epoch == sid[1] for h, _ in batches)
        pid_rows = [r for r in _data_rows(batches) if r["api_key"] == 15]
        assert len(pid_rows) <= 1
        for r in pid_rows:  # image form (ProducerIdsImage): no broker attached
            assert (r["broker_id"], r["broker_epoch"]) == (-1, -1)
            assert r["next_producer_id"] % 1000 == 0


@pytest.mark.real_logs
def test_snapshots_have_producer_ids_once_ids_were_allocated():
    # Producer-state snapshots of the data partitions (independent files) name
    # producer ids in use; every KRaft snapshot taken after they were granted
    # must restate a NextProducerId above them in its single ProducerIdsRecord.
    for root, latest_snapshot in (
        (JY, "00000000000000031680-0000000003.checkpoint"),
        (ITUMELENG, "00000000000000060500-0000000025.checkpoint"),
    ):
        pids = set()
        for s in root.glob("*/*.snapshot"):
            b = s.read_bytes()
            (n,) = struct.unpack_from(">i", b, 6)
            pids |= {struct.unpack_from(">q", b, 10 + 46 * i)[0] for i in range(n)}
        assert pids, root
        rows = [r for r in _data_rows(_read(root / MD / latest_snapshot)) if r["api_key"] == 15]
        assert len(rows) == 1
        assert max(pids) < rows[0]["next_producer_id"]
    # JY's producer snapshots hold ids 0, 1000 and 2000 (SOURCES.md: one per broker
    # restart, one block each), so three blocks were granted: next id is 3000
    jy = [r for r in _data_rows(_read(JY / MD / "00000000000000031680-0000000003.checkpoint"))
          if r["api_key"] == 15]
    assert jy[0]["next_producer_id"] == 3000


@pytest.mark.real_logs
def test_producer_ids_increase_by_blocks_across_a_dir():
    for md in sorted(REAL_LOGS.rglob(MD)):
        # log records in offset order, snapshots by end offset
        log_rows = []
        for p in sorted(md.glob("*.log")):
            log_rows += [r for r in _data_rows(_read(p)) if r["api_key"] == 15]
        nexts = [r["next_producer_id"] for r in log_rows]
        for a, b in zip(nexts, nexts[1:]):
            assert b > a and (b - a) % 1000 == 0, md
        for r in log_rows:
            assert r["broker_id"] >= 0 and r["broker_epoch"] >= 0  # a real grant names its broker
            blk = producer_id_block(r)
            assert blk["block_end"] - blk["block_start"] == 999
        snap = []
        for p in sorted(md.glob("*.checkpoint"), key=lambda p: parse_snapshot_name(p.name)):
            snap += [r["next_producer_id"] for r in _data_rows(_read(p)) if r["api_key"] == 15]
        assert snap == sorted(snap), md
    # LestFeeD: the live segment grants [11000, 11999] to broker 1, after the
    # snapshot at 113372 restated 11000; the producer snapshots use id 11002
    rows = [r for r in _data_rows(_read(LESTFEED / MD / "00000000000000116596.log")) if r["api_key"] == 15]
    assert [(r["broker_id"], producer_id_block(r)["block_start"]) for r in rows] == [(1, 11000)]
    pids = set()
    for s in LESTFEED.glob("*/*.snapshot"):
        b = s.read_bytes()
        (n,) = struct.unpack_from(">i", b, 6)
        pids |= {struct.unpack_from(">q", b, 10 + 46 * i)[0] for i in range(n)}
    assert max(pids) < rows[-1]["next_producer_id"]


@pytest.mark.real_logs
def test_new_log_starts_with_metadata_version():
    # kafka_2.13-3.5.0 in the directory name: Kafka 3.5.0 formats with
    # metadata.version 3.5-IV2 = feature level 11 (MetadataVersion enum)
    cases = {DANIEL_350: 11, DANIEL_KSQL: None, NILOUFAR: None, JEONG: None}
    for root, level in cases.items():
        batches = _read(root / MD / SEG0)
        assert batches[0][0].base_offset == 0
        rows = _data_rows(batches)
        first = rows[0]
        if first["record_type"] == "BEGIN_TRANSACTION_RECORD":
            # metadata.version >= 3.6-IV1 (13) wraps bootstrap records in a metadata txn
            assert json.loads(first["data_json"]) == {"name": "Bootstrap records"}
            first = rows[1]
            assert first["feature_level"] >= 13
            end = next(i for i, r in enumerate(rows) if r["record_type"] == "END_TRANSACTION_RECORD")
            assert end > 1
        else:
            assert first["feature_level"] < 13
        assert first["record_type"] == "FEATURE_LEVEL_RECORD"
        assert first["feature_name"] == "metadata.version"
        if level is not None:
            assert first["feature_level"] == level
        # the bootstrap.checkpoint next to the log carries the same metadata.version
        boot = _data_rows(_read(root / "bootstrap.checkpoint"))
        assert boot[0]["feature_name"] == "metadata.version"
        assert boot[0]["feature_level"] == first["feature_level"]


@pytest.mark.real_logs
def test_topic_record_for_every_topic_dir():
    checked = 0
    for md in sorted(REAL_LOGS.rglob(MD)):
        names, ids = set(), collections.defaultdict(set)
        for p in list(md.glob("*.log")) + list(md.glob("*.checkpoint")):
            for r in _data_rows(_read(p)):
                if r["api_key"] == 2:
                    names.add(r["topic_name"])
                    ids[r["topic_name"]].add(r["topic_id"])
        for d in md.parent.iterdir():
            if not d.is_dir() or d.name == MD or not re.fullmatch(r".+-\d+", d.name):
                continue
            topic = d.name.rsplit("-", 1)[0]
            assert topic in names, (md, d.name)
            pm = d / "partition.metadata"
            if pm.exists():  # written by the broker from the same topic id
                tid = re.search(r"topic_id: (\S+)", pm.read_text()).group(1)
                assert tid in ids[topic], (d, tid)
                checked += 1
        meta_pm = md / "partition.metadata"
        if meta_pm.exists():
            assert f"topic_id: {META_TOPIC_ID}" in meta_pm.read_text()
    assert checked > 500
    daniel = set()
    for r in _data_rows(_read(DANIEL_350 / MD / SEG0)):
        if r["api_key"] == 2:
            daniel.add(r["topic_name"])
    assert daniel == {"quickstartmore-events"}  # the only topic dir there


@pytest.mark.real_logs
def test_directory_ids_and_voters_match_meta_properties():
    def props(root: Path) -> dict:
        out = {}
        for line in (root / "meta.properties").read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                out[k] = v
        return out

    # Niloufar (metadata.version 19 = 3.7-IV4): RegisterBrokerRecord v3 lists the log dir
    p = props(NILOUFAR)
    regs = [r for r in _data_rows(_read(NILOUFAR / MD / SEG0)) if r["api_key"] == 0]
    assert regs and all(r["broker_id"] == int(p["node.id"]) for r in regs)
    assert all(json.loads(r["data_json"])["logDirs"] == [p["directory.id"]] for r in regs)
    # LestFeeD: PartitionRecord v1+ carries the directory of each replica
    p = props(LESTFEED)
    parts = [r for r in _data_rows(_read(LESTFEED / MD / "00000000000000134654-0000000028.checkpoint"))
             if r["api_key"] == 3]
    assert parts and all(json.loads(r["data_json"])["directories"] == [p["directory.id"]] for r in parts)
    # ronem (kraft.version 1): the snapshot header batch holds KRaftVersion + Voters
    p = props(RONEM)
    batches = _read(RONEM / MD / "00000000000001734780-0000000001.checkpoint")
    recs = batches[0][1]
    assert recs[1][2] == {"version": 0, "kRaftVersion": 1}
    voters = recs[2][2]["voters"]
    assert [(v["voterId"], v["voterUuid"]) for v in voters] == [(int(p["node.id"]), p["directory.id"])]


@pytest.mark.real_logs
def test_internal_topic_configs():
    # The group coordinator creates __consumer_offsets compacted (Kafka default
    # offsets topic configs): the ConfigRecords must say so.
    rows = _data_rows(_read(DANIEL_KSQL / MD / SEG0))
    cfg = {(r["config_resource_type"], r["config_name"]): r["config_value"]
           for r in rows if r["api_key"] == 4 and r["config_resource_name"] == "__consumer_offsets"}
    assert cfg[(2, "cleanup.policy")] == "compact"
    assert cfg[(2, "compression.type")] == "producer"
