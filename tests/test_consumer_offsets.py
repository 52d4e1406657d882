"""Tests for auditor.formats.consumer_offsets (__consumer_offsets records).

Ground truth: bytes assembled here with struct.pack from Kafka's
OffsetCommitKey/Value and GroupMetadataKey/Value schemas (field order and
version ranges), and every real __consumer_offsets segment in real_logs,
cross-checked against facts that do not come from this decoder: record counts
from the batch headers, the partition directories present in the same broker
log dir, and the record timestamps from the batch decoder.
"""

from __future__ import annotations

import glob
import json
import os
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from auditor.errors import DecodeError
from auditor.formats.batch import BatchHeader, iter_segment, read_payload
from auditor.formats.consumer_offsets import (
    GROUP_METADATA_COLUMNS,
    OFFSET_COMMIT_COLUMNS,
    decode_offsets_record,
    record_kind,
)
from auditor.formats.group_records import COLUMNS as GROUP_RECORD_COLUMNS
from auditor.formats.records import iter_records
from builders import cstr, s16, uvarint
from conftest import REAL_LOGS


# ---------------------------------------------------------------- encoders
# uvarint, s16 (int16-length string) and cstr (compact string) come from tests/builders.py
def b32(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def cb(b: bytes) -> bytes:  # compact bytes
    return uvarint(len(b) + 1) + b


def offset_key(version: int, group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", version) + s16(group) + s16(topic) + struct.pack(">i", partition)


def group_key(group: str) -> bytes:
    return struct.pack(">h", 2) + s16(group)


# ---------------------------------------------------------------- offset commits
OK = offset_key(1, "grp", "orders", 3)


def test_offset_commit_key_versions_0_and_1():
    for kv in (0, 1):
        row = decode_offsets_record(offset_key(kv, "grp", "orders", 3), None)
        assert row["record_type"] == "offset_commit"
        assert row["key_version"] == kv
        assert (row["group_id"], row["topic"], row["partition"]) == ("grp", "orders", 3)
        assert row["is_tombstone"] is True and row["value_version"] is None
        assert row["committed_offset"] is None
        assert list(row) == [c.name for c in OFFSET_COMMIT_COLUMNS]


def test_offset_commit_value_v0():
    v = struct.pack(">hq", 0, 1234) + s16("meta") + struct.pack(">q", 1600000000000)
    row = decode_offsets_record(OK, v)
    assert row["value_version"] == 0 and row["is_tombstone"] is False
    assert row["committed_offset"] == 1234
    assert row["committed_metadata"] == "meta"
    assert row["commit_timestamp_ms"] == 1600000000000
    assert row["committed_leader_epoch"] is None
    assert row["expire_timestamp_ms"] is None


def test_offset_commit_value_v1_has_expire():
    v = struct.pack(">hq", 1, 77) + s16("") + struct.pack(">qq", 1600000000000, 1600086400000)
    row = decode_offsets_record(OK, v)
    assert row["value_version"] == 1
    assert row["committed_offset"] == 77
    assert row["committed_metadata"] == ""
    assert row["commit_timestamp_ms"] == 1600000000000
    assert row["expire_timestamp_ms"] == 1600086400000
    assert row["committed_leader_epoch"] is None


def test_offset_commit_value_v2_drops_expire():
    v = struct.pack(">hq", 2, 5) + s16("m") + struct.pack(">q", 42)
    row = decode_offsets_record(OK, v)
    assert (row["value_version"], row["committed_offset"], row["commit_timestamp_ms"]) == (2, 5, 42)
    assert row["expire_timestamp_ms"] is None and row["committed_leader_epoch"] is None
    # a v1-shaped body read as v2 leaves 8 bytes over
    with pytest.raises(DecodeError) as ei:
        decode_offsets_record(OK, v + struct.pack(">q", 1))
    assert ei.value.position == len(v)


def test_offset_commit_value_v3_leader_epoch_after_offset():
    v = struct.pack(">hqi", 3, 9, 17) + s16("") + struct.pack(">q", 1685814551579)
    row = decode_offsets_record(OK, v)
    assert row["value_version"] == 3
    assert row["committed_offset"] == 9
    assert row["committed_leader_epoch"] == 17
    assert row["commit_timestamp_ms"] == 1685814551579
    assert row["expire_timestamp_ms"] is None


def test_offset_commit_value_v4_flexible_with_unknown_tag():
    v = struct.pack(">hqi", 4, 5, -1) + cstr("abc") + struct.pack(">q", 1765883866522)
    row = decode_offsets_record(OK, v + uvarint(0))
    assert row["value_version"] == 4
    assert (row["committed_offset"], row["committed_leader_epoch"], row["committed_metadata"]) == (5, -1, "abc")
    assert row["commit_timestamp_ms"] == 1765883866522
    assert row["unknown_tags_json"] is None
    tagged = uvarint(1) + uvarint(3) + uvarint(2) + b"\x01\x02"
    row = decode_offsets_record(OK, v + tagged)
    assert json.loads(row["unknown_tags_json"]) == {"3": "0102"}
    assert row["committed_offset"] == 5


def test_offset_commit_unknown_value_version():
    v = struct.pack(">hq", 5, 1) + s16("") + struct.pack(">q", 1)
    with pytest.raises(DecodeError) as ei:
        decode_offsets_record(OK, v)
    assert ei.value.kind == "unknown-version"


def test_offset_commit_truncations():
    values = [
        struct.pack(">hq", 0, 1234) + s16("meta") + struct.pack(">q", 16),
        struct.pack(">hq", 1, 77) + s16("") + struct.pack(">qq", 16, 17),
        struct.pack(">hqi", 3, 9, 17) + s16("x") + struct.pack(">q", 16),
        struct.pack(">hqi", 4, 5, -1) + cstr("abc") + struct.pack(">q", 16) + uvarint(0),
    ]
    for v in values:
        decode_offsets_record(OK, v)
        for n in range(len(v)):
            with pytest.raises(DecodeError) as ei:
                decode_offsets_record(OK, v[:n])
            assert 0 <= ei.value.position <= n
    for n in range(len(OK)):
        with pytest.raises(DecodeError):
            decode_offsets_record(OK[:n], None)


# ---------------------------------------------------------------- group metadata
def member_nonflex(version: int, member_id, instance, client_id, host, rebalance, session, sub, asg) -> bytes:
    out = s16(member_id)
    if version >= 3:
        out += s16(instance)
    out += s16(client_id) + s16(host)
    if version >= 1:
        out += struct.pack(">i", rebalance)
    return out + struct.pack(">i", session) + b32(sub) + b32(asg)


def group_value_nonflex(version: int, members: list[bytes], state_ts: int = 1700000000000) -> bytes:
    out = struct.pack(">h", version) + s16("consumer") + struct.pack(">i", 12) + s16("range") + s16("m-1")
    if version >= 2:
        out += struct.pack(">q", state_ts)
    return out + struct.pack(">i", len(members)) + b"".join(members)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_group_metadata_nonflexible_versions(version):
    members = [
        member_nonflex(version, "m-1", "static-1", "c-1", "/10.0.0.1", 300000, 45000, b"\x00\x01", b"\x02"),
        member_nonflex(version, "m-2", None, "c-2", "/10.0.0.2", 60000, 10000, b"", b""),
    ]
    row = decode_offsets_record(group_key("my-group"), group_value_nonflex(version, members))
    assert list(row) == [c.name for c in GROUP_METADATA_COLUMNS]
    assert row["record_type"] == "group_metadata"
    assert row["key_version"] == 2
    assert row["group_id"] == "my-group"
    assert row["value_version"] == version
    assert row["protocol_type"] == "consumer"
    assert row["generation"] == 12
    assert row["protocol"] == "range"
    assert row["leader"] == "m-1"
    assert row["current_state_timestamp_ms"] == (1700000000000 if version >= 2 else None)
    assert row["member_count"] == 2
    m1, m2 = row["members"]
    assert m1["member_id"] == "m-1" and m2["member_id"] == "m-2"
    assert m1["group_instance_id"] == ("static-1" if version >= 3 else None)
    assert m2["group_instance_id"] is None
    assert (m1["client_id"], m1["client_host"]) == ("c-1", "/10.0.0.1")
    assert m1["rebalance_timeout_ms"] == (300000 if version >= 1 else None)
    assert m2["rebalance_timeout_ms"] == (60000 if version >= 1 else None)
    assert (m1["session_timeout_ms"], m2["session_timeout_ms"]) == (45000, 10000)


def test_group_metadata_empty_group_null_protocol_and_leader():
    v = struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 5) + s16(None) + s16(None)
    v += struct.pack(">q", -1) + struct.pack(">i", 0)
    row = decode_offsets_record(group_key("g"), v)
    assert row["protocol"] is None and row["leader"] is None
    assert row["generation"] == 5
    assert row["current_state_timestamp_ms"] == -1
    assert row["member_count"] == 0 and row["members"] == []


def test_group_metadata_v4_flexible():
    member = (cstr("m-1") + cstr("inst") + cstr("c-1") + cstr("/h") + struct.pack(">ii", 1000, 2000)
              + cb(b"\x09") + cb(b"") + uvarint(1) + uvarint(0) + uvarint(1) + b"\xee")
    v = struct.pack(">h", 4) + cstr("connect") + struct.pack(">i", 3) + cstr("sessioned") + cstr(None)
    v += struct.pack(">q", 1690000000000) + uvarint(2) + member
    v += uvarint(1) + uvarint(6) + uvarint(1) + b"\x2a"
    row = decode_offsets_record(group_key("cg"), v)
    assert row["value_version"] == 4
    assert (row["protocol_type"], row["generation"], row["protocol"], row["leader"]) == ("connect", 3, "sessioned", None)
    assert row["current_state_timestamp_ms"] == 1690000000000
    assert row["members"] == [{
        "member_id": "m-1", "group_instance_id": "inst", "client_id": "c-1", "client_host": "/h",
        "rebalance_timeout_ms": 1000, "session_timeout_ms": 2000,
    }]
    assert json.loads(row["unknown_tags_json"]) == {"6": "2a", "members[0].0": "ee"}
    # truncations at every byte
    for n in range(len(v)):
        with pytest.raises(DecodeError):
            decode_offsets_record(group_key("cg"), v[:n])


def test_group_metadata_truncations_v3():
    v = group_value_nonflex(3, [member_nonflex(3, "m", None, "c", "/h", 1, 2, b"ab", b"cd")])
    decode_offsets_record(group_key("g"), v)
    for n in range(len(v)):
        with pytest.raises(DecodeError) as ei:
            decode_offsets_record(group_key("g"), v[:n])
        assert 0 <= ei.value.position <= n


def test_group_metadata_unknown_version_and_null_members():
    with pytest.raises(DecodeError) as ei:
        decode_offsets_record(group_key("g"), struct.pack(">h", 5) + b"\x00" * 20)
    assert ei.value.kind == "unknown-version"
    v = struct.pack(">h", 0) + s16("consumer") + struct.pack(">i", 1) + s16(None) + s16(None) + struct.pack(">i", -1)
    with pytest.raises(DecodeError):
        decode_offsets_record(group_key("g"), v)


def test_group_tombstone():
    row = decode_offsets_record(group_key("old"), None)
    assert row["record_type"] == "group_metadata" and row["is_tombstone"] is True
    assert row["group_id"] == "old" and row["members"] is None and row["member_count"] is None


# ---------------------------------------------------------------- other / bad keys
def test_newer_record_types_are_group_records():
    """Key prefixes 3+ are the newer group protocols' records (tests/test_group_records.py in depth)."""
    key = struct.pack(">h", 3) + s16("new-proto-group")
    assert record_kind(key) == "group_record" and record_kind(OK) == "offset_commit"
    assert record_kind(group_key("g")) == "group_metadata"
    # ConsumerGroupMetadataValue v0: epoch 7, no tagged fields
    row = decode_offsets_record(key, struct.pack(">hi", 0, 7) + b"\x00")
    assert list(row) == [c.name for c in GROUP_RECORD_COLUMNS]
    assert row["record_type"] == "ConsumerGroupMetadata" and row["group_type"] == "consumer"
    assert row["key_version"] == 3 and row["group_id"] == "new-proto-group"
    assert row["value_version"] == 0 and row["is_tombstone"] is False and row["group_epoch"] == 7
    row = decode_offsets_record(struct.pack(">h", 250) + b"\xff", None)
    assert row["record_type"] is None and row["key_version"] == 250
    assert row["group_id"] is None and row["is_tombstone"] is True


def test_bad_keys():
    with pytest.raises(DecodeError) as ei:
        decode_offsets_record(struct.pack(">h", -1) + s16("g"), None)
    assert ei.value.kind == "unknown-version"
    with pytest.raises(DecodeError):
        decode_offsets_record(None, b"\x00\x00")
    with pytest.raises(DecodeError) as ei:
        decode_offsets_record(group_key("g") + b"\x00", None)
    assert ei.value.position == 5
    with pytest.raises(DecodeError):
        decode_offsets_record(struct.pack(">h", 1) + s16("g") + s16(None) + struct.pack(">i", 0), None)


# ---------------------------------------------------------------- real files
REAL_FILES = sorted(Path(p) for p in glob.glob(str(REAL_LOGS / "**" / "__consumer_offsets-*" / "*.log"), recursive=True))


@pytest.mark.real_logs
def test_real_consumer_offsets_all_decode():
    files = [p for p in REAL_FILES if p.stat().st_size > 0]
    assert len(files) >= 38
    header_records = 0
    decoded = {"offset_commit": 0, "group_metadata": 0, "group_record": 0}
    multi_segment = set()
    for path in files:
        logdir = path.parent.parent
        partition_dirs = {d.name for d in logdir.iterdir() if d.is_dir()}
        if len(list(path.parent.glob("*.log"))) > 1:
            multi_segment.add(path.parent.name)
        with open(path, "rb") as f:
            for h in iter_segment(f, file_size=os.path.getsize(path)):
                assert isinstance(h, BatchHeader), (path, h)
                assert h.magic == 2 and not h.is_control
                header_records += h.record_count
                for r in iter_records(h, read_payload(f, h)):
                    row = decode_offsets_record(r.key, r.value)
                    decoded[record_kind(r.key)] += 1
                    assert isinstance(row["group_id"], str) and row["group_id"]
                    if row["record_type"] == "offset_commit" and not row["is_tombstone"]:
                        assert row["committed_offset"] >= 0
                        assert row["partition"] >= 0
                        # the committed partition exists in the same broker's log dir
                        assert f"{row['topic']}-{row['partition']}" in partition_dirs
                        # the coordinator stamps the commit when it appends it
                        assert abs(row["commit_timestamp_ms"] - r.timestamp) <= 1000
                    if row["record_type"] == "group_metadata" and not row["is_tombstone"]:
                        assert row["member_count"] == len(row["members"])
                        assert row["generation"] >= 0
                        if row["members"]:
                            assert row["leader"] in {m["member_id"] for m in row["members"]}
                            assert all(m["session_timeout_ms"] > 0 for m in row["members"])
    assert sum(decoded.values()) == header_records
    assert header_records == 4360
    assert decoded["offset_commit"] > 3000 and decoded["group_metadata"] > 1000
    assert {"__consumer_offsets-25", "__consumer_offsets-45"} <= multi_segment


@pytest.mark.real_logs
def test_real_dschne27_partition_47():
    path = REAL_LOGS / "dschne27__kafka-streams" / "broker" / "data" / "__consumer_offsets-47" / "00000000000000000000.log"
    n = 0
    with open(path, "rb") as f:
        for h in iter_segment(f, file_size=os.path.getsize(path)):
            for r in iter_records(h, read_payload(f, h)):
                row = decode_offsets_record(r.key, r.value)
                # the key is the group id verbatim after the int16 version and int16 length
                assert r.key[4:].startswith(row["group_id"].encode())
                n += 1
    assert n > 0


@pytest.mark.real_logs
def test_real_v4_offset_commit_ronem123():
    """The only flexible (v4) value in the corpus: a KRaft broker from 2026."""
    d = REAL_LOGS / "ronem123__rupia-transaction-service" / "kafka-logs" / "__consumer_offsets-44"
    found = []
    for path in sorted(d.glob("*.log")):
        with open(path, "rb") as f:
            for h in iter_segment(f, file_size=os.path.getsize(path)):
                for r in iter_records(h, read_payload(f, h)):
                    row = decode_offsets_record(r.key, r.value)
                    if row.get("value_version") == 4:
                        found.append((r, row))
    assert len(found) == 1
    r, row = found[0]
    assert row["group_id"] == "rupia-transaction-group"
    assert row["topic"] == "topic_transactions"  # the dir topic_transactions-0 exists (SOURCES.md)
    assert (row["partition"], row["committed_leader_epoch"], row["committed_metadata"]) == (0, -1, "")
    assert r.value == struct.pack(">hqi", 4, row["committed_offset"], -1) + uvarint(1) + struct.pack(">q", row["commit_timestamp_ms"]) + uvarint(0)


# ---------------------------------------------------------------- robustness
@settings(max_examples=400, deadline=None)
@given(st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), st.binary(max_size=160)))
def test_random_bytes_only_decode_error(key, value):
    try:
        decode_offsets_record(key, value)
    except DecodeError:
        pass


def _samples():
    out = []
    m = member_nonflex(3, "m", "i", "c", "/h", 1, 2, b"ab", b"cd")
    out.append((group_key("g"), group_value_nonflex(3, [m, m])))
    out.append((OK, struct.pack(">hqi", 3, 9, 17) + s16("x") + struct.pack(">q", 16)))
    out.append((OK, struct.pack(">hq", 1, 77) + s16("") + struct.pack(">qq", 16, 17)))
    out.append((OK, struct.pack(">hqi", 4, 5, -1) + cstr("abc") + struct.pack(">q", 16) + uvarint(0)))
    return out


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(_samples()), st.data())
def test_mutated_records_only_decode_error(sample, data):
    key, value = sample
    which = data.draw(st.booleans())
    buf = bytearray(value if which else key)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    buf = bytes(buf[: data.draw(st.integers(0, len(buf)))])
    try:
        decode_offsets_record(key, buf) if which else decode_offsets_record(buf, value)
    except DecodeError:
        pass


def test_rows_fit_arrow_schema():
    import pyarrow as pa

    m = member_nonflex(3, "m", None, "c", "/h", 1, 2, b"", b"")
    gm = [decode_offsets_record(group_key("g"), group_value_nonflex(v, [m] if v == 3 else [])) for v in range(4)]
    gm.append(decode_offsets_record(group_key("g"), None))
    oc = [decode_offsets_record(OK, struct.pack(">hq", 1, 77) + s16("") + struct.pack(">qq", 16, 17)),
          decode_offsets_record(OK, None)]
    other = [decode_offsets_record(struct.pack(">h", 5) + s16("g") + s16("m"), None)]
    assert pa.Table.from_pylist(gm, schema=pa.schema(GROUP_METADATA_COLUMNS)).num_rows == 5
    assert pa.Table.from_pylist(oc, schema=pa.schema(OFFSET_COMMIT_COLUMNS)).num_rows == 2
    assert pa.Table.from_pylist(other, schema=pa.schema(GROUP_RECORD_COLUMNS)).num_rows == 1
