"""KIP-848 consumer-group, KIP-932 share-group and streams-group records.

Ground truth, none of it from our decoders:

* Kafka's own message definitions (``common/message/*.json`` in the kafka-group-coordinator and
  kafka-share-coordinator jars of 4.3.1 and 4.4.0, from Maven Central): our schemas equal them;
* Kafka's own generated classes: random messages of every record type are built by their
  ``*JsonConverter.read`` and written by ``MessageUtil`` exactly as ``CoordinatorRecordSerde``
  writes them (``tests/java/CoordinatorRecordEncoder.java``), and we decode those bytes back to
  what the converter's ``write`` prints;
* Kafka's DumpLogSegments (``--offsets-decoder``, ``--share-group-state-decoder``, 4.3.1 and 4.4.0)
  on the real captures ``sample_logs/group-protocols`` (Kafka 4.3.1) and ``group-protocols-4.4``
  (4.4.0): every record equal;
* what the clients of those captures did (their expected.json: member ids from the consumers,
  assignments, the share consumer's delivered offsets): the rows and the pending transactional
  offset commit's group and member.
"""

from __future__ import annotations

import base64
import json
import random
import re
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import PROJECT, SAMPLE_LOGS
from auditor.errors import DecodeError
from auditor.formats import group_records as gr
from auditor.formats import share_state as ss
from auditor.formats.binary import Reader
from auditor.formats.checkpoints import read_partition_metadata
from auditor.formats.consumer_offsets import decode_offsets_record, record_kind
from auditor.formats.message import Field
from auditor.ingest.plan import make_plan
from auditor.ingest.tables import TABLES, iter_rows
from builders import s16

VERSIONS = ("4.3.1", "4.4.0")
CAPTURES = {"4.3.1": "group-protocols", "4.4.0": "group-protocols-4.4"}
ENCODER = PROJECT / "tests" / "java" / "CoordinatorRecordEncoder.java"


def _libs(version: str) -> Path:
    from dumptool import kafka_libs

    return kafka_libs(version)


def _kafka_name(name: str) -> str:
    """The JSON field name Kafka's converters use: the schema name with a lower-case first letter."""
    return name[0].lower() + name[1:]


# ---------------------------------------------------------------- schemas against the jars' definitions
def _jar_messages(version: str) -> dict[str, dict]:
    out = {}
    libs = _libs(version)
    for jar in ("kafka-group-coordinator", "kafka-share-coordinator"):
        with zipfile.ZipFile(libs / f"{jar}-{version}.jar") as z:
            for n in z.namelist():
                if n.startswith("common/message/") and n.endswith(".json"):
                    text = re.sub(r"^\s*//.*$", "", z.read(n).decode(), flags=re.M)
                    d = json.loads(text)
                    d["_jar"] = jar
                    out[d["name"]] = d
    return out


_PRIMITIVE = {"int8", "int16", "uint16", "int32", "int64", "float64", "bool", "string", "bytes", "uuid"}


def _same_fields(ours, theirs: list[dict], structs: dict[str, list], where: str) -> None:
    """``ours`` declares ``theirs`` field by field; it may end with tagged fields a later release added
    (a reader of the older one keeps them as unknown tags: the same bytes decode the same)."""
    extra = list(ours)[len(theirs):]
    assert all(f.tag is not None for f in extra), where
    ours = list(ours)[:len(theirs)]
    assert [f.name for f in ours] == [f["name"] for f in theirs], where
    for o, t in zip(ours, theirs):
        w = f"{where}.{o.name}"
        typ = t["type"]
        inner = typ[2:] if typ.startswith("[]") else typ
        if inner in _PRIMITIVE:
            assert o.type == typ, w
        else:
            assert o.type == ("[]struct" if typ.startswith("[]") else "struct"), w
            _same_fields(o.fields, t.get("fields") or structs[inner], structs, w)
        versions = t.get("versions") or t.get("taggedVersions")
        assert o.versions == versions, w
        assert o.nullable_versions == t.get("nullableVersions"), w
        assert o.tag == t.get("tag"), w
        if "tag" in t:
            assert (o.tagged_versions or o.versions) == t["taggedVersions"], w
        d = t.get("default")
        if d not in (None, "null") and inner in ("int8", "int16", "int32", "int64"):
            assert o.default == int(d), w


@pytest.mark.parametrize("version", VERSIONS)
def test_schemas_equal_kafka_message_definitions(version):
    msgs = _jar_messages(version)
    group_values = {d["apiKey"]: d for d in msgs.values()
                    if d["_jar"] == "kafka-group-coordinator" and d["type"] == "coordinator-value" and d["apiKey"] >= 3}
    assert set(group_values) == set(gr.RECORD_TYPES), "record type ids"
    share_values = {d["apiKey"]: d for d in msgs.values()
                    if d["_jar"] == "kafka-share-coordinator" and d["type"] == "coordinator-value"}
    assert set(share_values) == set(ss.RECORD_TYPES)
    checked = 0
    for type_id, rt in gr.RECORD_TYPES.items():
        value = group_values[type_id]
        assert value["name"] == rt.name + "Value" == rt.value.name
        key = msgs[rt.name + "Key"]
        assert key["apiKey"] == type_id and key["flexibleVersions"] == "none"
        structs = {s["name"]: s["fields"] for s in value.get("commonStructs", [])}
        _same_fields(rt.value.fields, value["fields"], structs, rt.value.name)
        assert (rt.value.valid_versions, rt.value.flexible_versions) == (value["validVersions"], value["flexibleVersions"])
        assert [f.name for f in rt.key.fields] == [f["name"] for f in key["fields"]]
        assert [f.type for f in rt.key.fields] == [f["type"] for f in key["fields"]]
        checked += 2
    for type_id, (name, schema) in ss.RECORD_TYPES.items():
        value = share_values[type_id]
        assert value["name"] == name + "Value" == schema.name
        _same_fields(schema.fields, value["fields"], {}, schema.name)
        key = msgs[name + "Key"]
        assert [(f.name, f.type) for f in ss.SHARE_KEY.fields] == [(f["name"], f["type"]) for f in key["fields"]]
        checked += 2
    assert checked == 2 * (19 + 2)


def test_streams_group_metadata_tags_of_4_4():
    """4.4.0 added StreamsGroupMetadataValue tags 2 and 3; 4.3.1's definition has neither."""
    old = _jar_messages("4.3.1")["StreamsGroupMetadataValue"]
    new = _jar_messages("4.4.0")["StreamsGroupMetadataValue"]
    assert [f.get("tag") for f in old["fields"] if "tag" in f] == [0, 1]
    assert [f.get("tag") for f in new["fields"] if "tag" in f] == [0, 1, 2, 3]
    assert [f.tag for f in gr.STREAMS_GROUP_METADATA_VALUE.fields if f.tag is not None] == [0, 1, 2, 3]


# ---------------------------------------------------------------- round trip through Kafka's own classes
def _sample(fields, rng: random.Random, depth: int = 0) -> dict:
    out = {}
    for f in fields:
        nullable = f.nullable_versions is not None
        if f.tag is not None and rng.random() < 0.3:
            continue  # a tagged field left at its default
        if nullable and rng.random() < 0.25:
            out[_kafka_name(f.name)] = None
            continue
        out[_kafka_name(f.name)] = _sample_value(f, f.type, rng, depth)
    return out


def _sample_value(f: Field, typ: str, rng: random.Random, depth: int):
    if typ.startswith("[]"):
        return [_sample_value(f, typ[2:], rng, depth + 1) for _ in range(rng.randint(0, 3 if depth < 2 else 1))]
    if typ == "struct":
        return _sample(f.fields, rng, depth + 1)
    bits = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
    if typ in bits:
        b = bits[typ]
        return rng.choice([0, -1, 1, 2 ** (b - 1) - 1, -(2 ** (b - 1)), rng.randint(-(2 ** (b - 1)), 2 ** (b - 1) - 1)])
    if typ == "uint16":
        return rng.randint(0, 65535)
    if typ == "string":
        return rng.choice(["", "g", "consumer-1", "grüße ✓", "x" * rng.randint(1, 300)])
    if typ == "uuid":
        return base64.urlsafe_b64encode(rng.randbytes(16)).decode().rstrip("=")
    if typ == "bytes":
        return base64.b64encode(rng.randbytes(rng.randint(0, 20))).decode()
    if typ == "bool":
        return rng.random() < 0.5
    raise AssertionError(typ)


def _encode(version: str, lines: list[str]) -> list[tuple[bytes, dict]]:
    proc = subprocess.run(["java", "-Xmx256m", "-Dstdout.encoding=UTF-8", "-Dfile.encoding=UTF-8", "-cp", f"{_libs(version)}/*",
                           str(ENCODER)], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = []
    for line in proc.stdout.splitlines():
        hexed, js = line.split(" ", 1)
        out.append((bytes.fromhex(hexed), json.loads(js)))
    assert len(out) == len(lines)
    return out


def _as_kafka_json(schema_fields, decoded: dict) -> dict:
    """Our decoded value in the converters' vocabulary (names, bytes as base64)."""
    out = {}
    for f in schema_fields:
        out[_kafka_name(f.name)] = _json_value(f, f.type, decoded.get(f.name))
    return out


def _json_value(f: Field, typ: str, v):
    if v is None:
        return None
    if typ.startswith("[]"):
        return [_json_value(f, typ[2:], x) for x in v]
    if typ == "struct":
        return _as_kafka_json(f.fields, v)
    if typ == "bytes":
        return base64.b64encode(bytes.fromhex(v)).decode()
    return v


def _default_json(f: Field):
    if f.default is not None:
        return f.default
    return None if f.type.startswith("[]") or f.type == "struct" or f.nullable_versions else {"int64": 0, "int32": 0}.get(f.type)


def _assert_matches(fields, ours: dict, theirs: dict, where: str) -> None:
    """Every field the converter printed equals ours; one it left out (a tagged field at its default) is
    at the default in ours."""
    for f in fields:
        k = _kafka_name(f.name)
        if k in theirs:
            if f.type == "struct" and theirs[k] is not None:
                _assert_matches(f.fields, ours[k], theirs[k], f"{where}.{k}")
            elif f.type == "[]struct" and theirs[k] is not None:
                assert len(ours[k]) == len(theirs[k]), where
                for i, (o, t) in enumerate(zip(ours[k], theirs[k])):
                    _assert_matches(f.fields, o, t, f"{where}.{k}[{i}]")
            else:
                assert ours[k] == theirs[k], f"{where}.{k}: ours {ours[k]!r} vs Kafka {theirs[k]!r}"
        else:
            assert f.tag is not None, f"{where}: Kafka printed no {k}"
            assert ours[k] == _default_json(f), f"{where}.{k}"


@pytest.mark.parametrize("version", VERSIONS)
def test_round_trip_through_kafka_generated_classes(version):
    rng = random.Random(f"group-records-{version}")
    cases = []  # (package, name, schema fields, is_key, type id)
    for type_id, rt in gr.RECORD_TYPES.items():
        cases.append(("group", rt.name + "Key", rt.key.fields, True, type_id))
        cases.append(("group", rt.name + "Value", rt.value.fields, False, type_id))
    for type_id, (name, schema) in ss.RECORD_TYPES.items():
        cases.append(("share", name + "Key", ss.SHARE_KEY.fields, True, type_id))
        cases.append(("share", name + "Value", schema.fields, False, type_id))
    lines, meta = [], []
    for pkg, name, fields, is_key, type_id in cases:
        for _ in range(1 if is_key else 12):
            sample = _sample(fields, rng)
            if is_key:  # keys are never null, their strings non-null
                sample = {k: (v if v is not None else "k") for k, v in sample.items()}
            lines.append(f"{pkg} {name} 0 {json.dumps(sample, ensure_ascii=False)}")
            meta.append((pkg, name, fields, is_key, type_id))
    encoded = _encode(version, lines)
    compared = 0
    for (pkg, name, fields, is_key, type_id), (data, kafka_json) in zip(meta, encoded):
        if is_key:
            assert struct.unpack(">h", data[:2])[0] == type_id
            if pkg == "group":
                row = decode_offsets_record(data, None)
                assert record_kind(data) == "group_record"
                assert row["record_type"] == name[:-3] and row["is_tombstone"] is True
                assert row["group_id"] == kafka_json["groupId"]
                assert row["member_id"] == kafka_json.get("memberId")
                assert row["regular_expression"] == kafka_json.get("regularExpression")
            else:
                row = ss.decode_share_state_record(data, None)
                assert (row["group_id"], row["topic_id"], row["partition"]) == (
                    kafka_json["groupId"], kafka_json["topicId"], kafka_json["partition"])
        else:
            schema = gr.RECORD_TYPES[type_id].value if pkg == "group" else ss.RECORD_TYPES[type_id][1]
            r = Reader(data)
            assert r.int16() == 0
            from auditor.formats.message import decode

            ours = _as_kafka_json(fields, decode(schema, r, 0))
            assert r.remaining() == 0
            _assert_matches(fields, ours, kafka_json, name)
            # and through the table decoders
            if pkg == "group":
                key = struct.pack(">h", type_id) + s16("g") + (s16("m") if gr.RECORD_TYPES[type_id].key is not gr.GROUP_KEY else b"")
                row = decode_offsets_record(key, data)
                assert json.loads(row["value_json"]) == _plain_names(decode(schema, Reader(data[2:]), 0))
                assert row["unknown_tags_json"] is None
            else:
                key = struct.pack(">h", type_id) + s16("g") + bytes(16) + struct.pack(">i", 0)
                row = ss.decode_share_state_record(key, data)
                assert row["start_offset"] == kafka_json["startOffset"]
                assert [b["first_offset"] for b in row["state_batches"]] == [b["firstOffset"] for b in kafka_json["stateBatches"]]
        compared += 1
    assert compared == len(lines) >= 19 * 13 + 2 * 13


def _plain_names(v):
    if isinstance(v, dict):
        return {k: _plain_names(x) for k, x in v.items() if not k.startswith("_")}
    if isinstance(v, list):
        return [_plain_names(x) for x in v]
    return v


# ---------------------------------------------------------------- hand-made bytes: presence markers, bad input
def _member_value(classic: bytes | None) -> bytes:
    body = (b"\x00\x00"  # version 0
            + b"\x00" + b"\x00"  # instanceId, rackId: null compact strings
            + b"\x02c" + b"\x02h"  # clientId "c", clientHost "h"
            + b"\x02\x02t"  # subscribedTopicNames ["t"]
            + b"\x01"  # subscribedTopicRegex null
            + struct.pack(">i", 1000)  # rebalanceTimeoutMs
            + b"\x00")  # serverAssignor null
    if classic is None:
        return body + b"\x00"
    return body + b"\x01\x00" + bytes([len(classic)]) + classic


def test_classic_member_metadata_presence_marker():
    key = struct.pack(">h", 5) + s16("grp") + s16("m-1")
    # written by a 4.x coordinator for a consumer-protocol member: tag 0 present, marker 0 (null)
    row = decode_offsets_record(key, _member_value(b"\x00"))
    assert row["classic_protocols"] is None and row["client_id"] == "c" and row["subscribed_topic_names"] == ["t"]
    # a classic-protocol member of a consumer group: marker 1, session timeout, protocols [range: 0x01]
    classic = b"\x01" + struct.pack(">i", 45000) + b"\x02" + b"\x06range" + b"\x02\x01" + b"\x00" + b"\x00"
    row = decode_offsets_record(key, _member_value(classic))
    assert row["classic_protocols"] == ["range"] and row["classic_session_timeout_ms"] == 45000
    assert row["member_id"] == "m-1" and row["group_type"] == "consumer"
    # the tag left out altogether: the default (null)
    assert decode_offsets_record(key, _member_value(None))["classic_protocols"] is None


def test_streams_member_endpoint_presence_byte():
    key = struct.pack(">h", 19) + s16("app") + s16("m")
    base = b"\x00\x00" + b"\x00\x00" + b"\x02c\x02h" + struct.pack(">ii", -1, 3) + b"\x02p"
    tail = b"\x01" + b"\x00"  # clientTags [], tags
    row = decode_offsets_record(key, base + b"\xff" + tail)
    assert json.loads(row["value_json"])["UserEndpoint"] is None
    row = decode_offsets_record(key, base + b"\x01" + b"\x05host" + struct.pack(">H", 8080) + b"\x00" + tail)
    assert json.loads(row["value_json"])["UserEndpoint"] == {"Host": "host", "Port": 8080}
    assert row["group_type"] == "streams" and row["client_id"] == "c"


def test_unknown_record_type_is_a_row_not_an_error():
    row = decode_offsets_record(struct.pack(">h", 99) + s16("future-group") + b"\x01\x02", struct.pack(">h", 7) + b"\x00")
    assert row["record_type"] is None and row["key_version"] == 99
    assert row["group_id"] == "future-group" and row["value_version"] == 7 and row["is_tombstone"] is False
    assert list(row) == [c.name for c in gr.COLUMNS]
    row = decode_offsets_record(struct.pack(">h", 9) + b"\xff", None)  # 9: retired ShareGroupPartitionMetadata
    assert row["record_type"] is None and row["group_id"] is None and row["is_tombstone"] is True


def test_bad_records_raise_with_positions():
    key = struct.pack(">h", 8) + s16("g") + s16("m")
    value = (b"\x00\x00" + struct.pack(">iib", 5, 4, 0) + b"\x02" + bytes(range(16)) + b"\x02" + struct.pack(">i", 3)
             + b"\x00" + b"\x01" + b"\x00")
    row = decode_offsets_record(key, value)
    assert row["member_epoch"] == 5 and row["member_state"] == "STABLE"
    assert row["assigned_partitions"][0]["partitions"] == [3] and row["partitions_pending_revocation"] == []
    for n in range(len(value)):
        with pytest.raises(DecodeError) as ei:
            decode_offsets_record(key, value[:n])
        assert 0 <= ei.value.position <= n
        assert "ConsumerGroupCurrentMemberAssignment" in ei.value.message
    with pytest.raises(DecodeError) as ei:
        decode_offsets_record(key, value + b"\x00")
    assert ei.value.position == len(value)
    with pytest.raises(DecodeError) as ei:
        decode_offsets_record(key, b"\x00\x01" + value[2:])
    assert ei.value.kind == "unknown-version"
    for n in range(2, len(key)):
        with pytest.raises(DecodeError):
            decode_offsets_record(key[:n], None)
    with pytest.raises(DecodeError):
        decode_offsets_record(struct.pack(">h", 3) + s16(None), None)
    with pytest.raises(DecodeError):
        record_kind(b"\x00")
    with pytest.raises(DecodeError):
        ss.decode_share_state_record(None, None)
    with pytest.raises(DecodeError) as ei:
        ss.decode_share_state_record(struct.pack(">h", 2) + s16("g"), None)
    assert ei.value.kind == "unknown-version"


# ---------------------------------------------------------------- the real captures
def _expected(version: str) -> dict:
    return json.loads((SAMPLE_LOGS / CAPTURES[version] / "expected.json").read_text())


def _rows(version: str, table: str) -> list[dict]:
    plan = make_plan([str(SAMPLE_LOGS / CAPTURES[version])], split_bytes=1 << 62)
    spec = TABLES[table]
    rows = [r for t in plan.tasks if spec.accepts(t) for r in iter_rows(spec, t)]
    bad = [r for r in rows if r.get("_problem_kind")]
    assert not bad, bad[:3]
    return rows


def _topic_id(version: str, topic: str) -> str:
    path = SAMPLE_LOGS / CAPTURES[version] / "broker-1" / f"{topic}-0" / "partition.metadata"
    return read_partition_metadata(path.read_bytes())["topic_id"]


@pytest.mark.parametrize("version", VERSIONS)
def test_capture_decodes_whole_and_matches_the_clients(version):
    exp = _expected(version)
    assert exp["kafka_version"] == version
    rows = _rows(version, "group_records")
    assert rows and all(r["record_type"] is not None for r in rows)
    by = {}
    for r in rows:
        by.setdefault((r["group_id"], r["record_type"]), []).append(r)
    g = exp["groups"]["etl-848"]
    members = by[("etl-848", "ConsumerGroupMemberMetadata")]
    live = [m for m in members if not m["is_tombstone"]]
    assert {m["member_id"] for m in members} == {g["member_id"]}
    assert live[0]["client_id"] == g["client_id"] and live[0]["subscribed_topic_names"] == g["subscribed_topics"]
    assert live[0]["classic_protocols"] is None  # group.protocol=consumer
    assert any(m["is_tombstone"] for m in members), "the consumer left the group before the broker stopped"
    input_id = _topic_id(version, "input")
    current = [r for r in by[("etl-848", "ConsumerGroupCurrentMemberAssignment")] if not r["is_tombstone"]]
    owned = {f"input-{p}" for a in current[-1]["assigned_partitions"] if a["topic_id"] == input_id for p in a["partitions"]}
    assert sorted(owned) == g["assigned_partitions"]
    assert current[-1]["member_epoch"] >= 1 and current[-1]["member_state"] == "STABLE"
    assert all(r["group_type"] == "consumer" for r in rows if r["group_id"] == "etl-848")
    # the regular-expression subscription
    rx = exp["groups"]["regex-848"]
    regex = [r for r in by[("regex-848", "ConsumerGroupRegularExpression")] if not r["is_tombstone"]]
    assert regex and rx["subscribed_regex"] in regex[0]["regular_expression"] and regex[0]["resolved_topics"] == ["input"]
    rmd = [r for r in by[("regex-848", "ConsumerGroupMemberMetadata")] if not r["is_tombstone"]]
    assert rmd[0]["member_id"] == rx["member_id"] and rx["subscribed_regex"] in rmd[0]["subscribed_topic_regex"]
    # the share group: member, and its state in __share_group_state
    sh = exp["groups"]["share-grp"]
    smd = [r for r in by[("share-grp", "ShareGroupMemberMetadata")] if not r["is_tombstone"]]
    assert smd[0]["client_id"] == sh["client_id"] and smd[0]["subscribed_topic_names"] == [sh["topic"]]
    shared_id = _topic_id(version, sh["topic"])
    spm = by[("share-grp", "ShareGroupStatePartitionMetadata")]
    assert any(t["TopicId"] == shared_id for r in spm for t in json.loads(r["value_json"])["InitializedTopics"])
    state = sorted(_rows(version, "share_group_state"), key=lambda r: (r["log_partition"], r["offset"]))
    assert {r["record_type"] for r in state} == {"ShareSnapshot", "ShareUpdate"}
    assert {(r["group_id"], r["topic_id"], r["partition"]) for r in state} == {("share-grp", shared_id, sh["partition"])}
    done = set()
    for r in state:  # replay: the start offset and the acknowledged batches
        if r["start_offset"] is not None and r["start_offset"] >= 0:
            done |= set(range(r["start_offset"]))
        for b in r["state_batches"]:
            if b["delivery_state"] == "ACKNOWLEDGED":
                done |= set(range(b["first_offset"], b["last_offset"] + 1))
    assert sorted(done) == sh["delivered_offsets"]
    assert all(b["delivery_count"] == 1 for r in state for b in r["state_batches"])


@pytest.mark.parametrize("version", VERSIONS)
def test_capture_equals_kafka_dump_tool(version):
    from dumptool import parse, run_dump

    base = SAMPLE_LOGS / CAPTURES[version] / "broker-1"
    compared = 0
    for flag, pattern, table in (("--offsets-decoder", "__consumer_offsets-*", "group_records"),
                                 ("--share-group-state-decoder", "__share_group_state-*", "share_group_state")):
        files = sorted(p for p in base.glob(f"{pattern}/*.log") if p.stat().st_size)
        theirs = parse(run_dump(files, flag, version=version))
        ours = {(r["file"], r["offset"]): r for r in _rows(version, table)}
        for path, d in theirs.items():
            for b in d.batches:
                for rec in b["records"]:
                    if "endTxnMarker" in rec or int(rec["key"]["type"]) < (3 if table == "group_records" else 0):
                        continue
                    row = ours.pop((str(Path(path).resolve()), rec["offset"]), None) or ours.pop((path, rec["offset"]))
                    _compare_dump(row, rec, table)
                    compared += 1
        assert not ours, f"rows the tool did not print: {list(ours)[:3]}"
    assert compared >= 36  # 36 group records and 2 share-state records in the 4.3.1 capture


def _compare_dump(row: dict, rec: dict, table: str) -> None:
    k = rec["key"]["data"]
    assert row["key_version"] == int(rec["key"]["type"])
    assert row["group_id"] == k["groupId"]
    if table == "group_records":
        assert row["member_id"] == k.get("memberId") and row["regular_expression"] == k.get("regularExpression")
        schema = gr.RECORD_TYPES[row["key_version"]].value
    else:
        assert (row["topic_id"], row["partition"]) == (k["topicId"], k["partition"])
        schema = ss.RECORD_TYPES[row["key_version"]][1]
    if rec["payload"] == "<DELETE>":
        assert row["is_tombstone"] is True
        return
    assert row["is_tombstone"] is False and row["value_version"] == int(rec["payload"]["version"])
    if table == "group_records":
        ours = _as_kafka_json(schema.fields, json.loads(row["value_json"]))
    else:
        ours = {"snapshotEpoch": row["snapshot_epoch"], "stateEpoch": row["state_epoch"], "leaderEpoch": row["leader_epoch"],
                "startOffset": row["start_offset"], "deliveryCompleteCount": row["delivery_complete_count"],
                "createTimestamp": row["create_timestamp_ms"], "writeTimestamp": row["write_timestamp_ms"],
                "stateBatches": [{"firstOffset": b["first_offset"], "lastOffset": b["last_offset"],
                                  "deliveryState": {v: k for k, v in ss.DELIVERY_STATES.items()}[b["delivery_state"]],
                                  "deliveryCount": b["delivery_count"]} for b in row["state_batches"]]}
        ours = {k: v for k, v in ours.items() if any(_kafka_name(f.name) == k for f in schema.fields)}
    _assert_matches(schema.fields, ours, rec["payload"]["data"], row["record_type"])


# ---------------------------------------------------------------- the pending commit's group and member (Spark)
@pytest.fixture(scope="module")
def audited(spark, tmp_path_factory):
    """The two captures and consumer-offsets-hanging (classic protocol) ingested and audited together:
    each is a cluster of its own (its cluster id), split back by it."""
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest
    from auditor.engine.context import AuditContext
    from auditor.formats.checkpoints import read_meta_properties

    names = {**CAPTURES, "classic": "consumer-offsets-hanging"}
    cluster = {read_meta_properties((SAMPLE_LOGS / n / "broker-1" / "meta.properties").read_bytes())["cluster_id"]: k
               for k, n in names.items()}
    assert len(cluster) == len(names)
    tables = tmp_path_factory.mktemp("group-records") / "tables"
    res = ingest(spark, [str(SAMPLE_LOGS / n) for n in names.values()], str(tables))
    assert res.bad_files == []
    ctx = AuditContext(spark, str(tables))
    try:
        groups = [r.asDict(recursive=True) for r in ctx.offset_commit_groups.collect()]
    finally:
        ctx.close()
    findings = audit(spark, str(tables)).findings
    return {k: ([g for g in groups if cluster[g["cluster_id"]] == k], [f for f in findings if cluster[f["cluster_id"]] == k])
            for k in names}


@pytest.mark.spark
@pytest.mark.parametrize("version", VERSIONS)
def test_pending_commit_names_its_consumer_protocol_group_and_member(audited, version):
    groups, findings = audited[version]
    exp = _expected(version)
    pending = next(a for a in exp["expect"]["anomalies"] if a["type"] == "pending-transactional-offset-commit")
    assert len(groups) == 1
    g = groups[0]
    assert (g["topic"], g["partition"], g["producer_id"], g["first_offset"]) == (
        "__consumer_offsets", pending["partition"], pending["producer_id"], pending["first_offset"])
    assert g["group_id"] == pending["group_id"] and g["group_protocol"] == pending["group_protocol"] == "consumer"
    assert g["committed"] == sorted(f"{c['topic']}-{c['partition']}@{c['committed_offset']}" for c in pending["committed"])
    assert [m["member_id"] for m in g["members"]] == [pending["member_id"]]
    m = g["members"][0]
    assert m["client_id"] == pending["client_id"] and m["protocol"] == "consumer"
    assert m["assigned_partitions"] == pending["assigned_partitions"] and m["member_epoch"] >= 1
    f = next(f for f in findings if f["rule"] == "hanging-transaction" and f["topic"] == "__consumer_offsets")
    ev = f["evidence"]
    assert ev["offset_commit_groups"] == [f"{pending['group_id']} (consumer protocol (KIP-848), offsets "
                                          + ", ".join(g["committed"]) + ")"]
    assert len(ev["offset_commit_members"]) == 1 and pending["member_id"] in ev["offset_commit_members"][0]
    assert f"client {pending['client_id']}" in f["message"] and " ".join(pending["assigned_partitions"]) in f["message"]
    other = next(f for f in findings if f["rule"] == "hanging-transaction" and f["topic"] == "output")
    assert other["evidence"].get("offset_commit_groups") in (None, [])


@pytest.mark.spark
def test_pending_commit_of_a_classic_group(audited):
    """consumer-offsets-hanging: librdkafka's classic protocol; members from the GroupMetadata before the commit."""
    groups, findings = audited["classic"]
    exp = json.loads((SAMPLE_LOGS / "consumer-offsets-hanging" / "expected.json").read_text())
    pending = next(a for a in exp["expect"]["anomalies"] if a["type"] == "pending-transactional-offset-commit")
    assert [(g["group_id"], g["group_protocol"]) for g in groups] == [(pending["group_id"], "classic")]
    assert len(groups[0]["members"]) == 1 and groups[0]["members"][0]["protocol"] == "classic"
    assert groups[0]["members"][0]["member_epoch"] is None and groups[0]["members"][0]["assigned_partitions"] is None
    f = next(f for f in findings if f["rule"] == "hanging-transaction" and f["topic"] == "__consumer_offsets")
    assert f["evidence"]["offset_commit_groups"][0].startswith(f"{pending['group_id']} (classic protocol")


# ---------------------------------------------------------------- mutated real records: problems, never crashes
def _real_records() -> list[tuple[str, bytes, bytes | None]]:
    import os

    from auditor.formats.batch import iter_segment, read_payload
    from auditor.formats.records import iter_records

    out = []
    for topic in ("__consumer_offsets", "__share_group_state"):
        for path in sorted((SAMPLE_LOGS / CAPTURES["4.4.0"] / "broker-1").glob(f"{topic}-*/*.log")):
            with open(path, "rb") as f:
                for h in iter_segment(f, file_size=os.path.getsize(path)):
                    if h.is_control:
                        continue
                    out += [(topic, r.key, r.value) for r in iter_records(h, read_payload(f, h))]
    return out


REAL_RECORDS = _real_records()


def test_real_records_cover_the_capture():
    kinds = {(t, struct.unpack(">h", k[:2])[0]) for t, k, _ in REAL_RECORDS}
    assert {("__consumer_offsets", i) for i in (1, 3, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16)} <= kinds
    assert {("__share_group_state", 0), ("__share_group_state", 1)} <= kinds


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_mutated_records_are_decode_errors_or_rows(data):
    topic, key, value = data.draw(st.sampled_from(REAL_RECORDS))
    part = data.draw(st.sampled_from(["key", "value"]))
    buf = bytearray(key if part == "key" else (value or b""))
    op = data.draw(st.sampled_from(["flip", "cut", "append"]))
    if op == "flip" and buf:
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    elif op == "cut":
        del buf[data.draw(st.integers(0, len(buf))):]
    else:
        buf += data.draw(st.binary(min_size=1, max_size=8))
    k, v = (bytes(buf), value) if part == "key" else (key, bytes(buf))
    decode = decode_offsets_record if topic == "__consumer_offsets" else ss.decode_share_state_record
    try:
        row = decode(k, v)
    except DecodeError as exc:
        assert exc.position >= 0 and exc.message
        return
    assert isinstance(row, dict) and "record_type" in row
