"""Tests for auditor.formats.checkpoints (text side files of partitions and log dirs).

Ground truth: broker ids, versions and cluster ids stated in real_logs/SOURCES.md,
a naive line count of each real checkpoint file done here in the test, Kafka's
well-known metadata topic id (Uuid 0/1 = AAAAAAAAAAAAAAAAAAAAAQ), and
malformed files written by hand following docs/on-disk-format.md §7.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from auditor.errors import DecodeError
from auditor.formats.checkpoints import (
    CHECKPOINT_COLUMNS,
    CHECKPOINT_FILES,
    CLEAN_SHUTDOWN_COLUMNS,
    LEADER_EPOCH_COLUMNS,
    META_PROPERTIES_COLUMNS,
    PARTITION_METADATA_COLUMNS,
    QUORUM_STATE_COLUMNS,
    checkpoint_kind,
    read_clean_shutdown,
    read_leader_epoch_checkpoint,
    read_meta_properties,
    read_offset_checkpoint,
    read_partition_metadata,
    read_quorum_state,
)
from conftest import REAL_LOGS

ITUMELENG = REAL_LOGS / "ItumelengMogase__Real-Time-Data-Pipeline-for-Patient-Admissions" / "kafka-data"
DANIEL = REAL_LOGS / "Danielowo2000__BigDataTechnologies-Version-2"


def names(cols) -> list[str]:
    return [f.name for f in cols]


def test_columns_match_row_keys():
    assert names(CHECKPOINT_COLUMNS) == list(read_offset_checkpoint(b"0\n1\nt 0 5\n", "cleaner-offset")[0])
    assert names(LEADER_EPOCH_COLUMNS) == list(read_leader_epoch_checkpoint(b"0\n1\n0 0\n")[0])
    assert names(META_PROPERTIES_COLUMNS) == list(read_meta_properties(b"version=0\nbroker.id=1\n"))
    assert names(PARTITION_METADATA_COLUMNS) == list(
        read_partition_metadata(b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ")
    )
    assert names(QUORUM_STATE_COLUMNS) == list(read_quorum_state(b'{"leaderId":1}'))
    assert names(CLEAN_SHUTDOWN_COLUMNS) == list(read_clean_shutdown(b""))


# -- real files --------------------------------------------------------------------

def _naive_count(data: bytes) -> int:
    lines = data.decode().splitlines()
    return int(lines[1]) if len(lines) > 1 else 0


@pytest.mark.real_logs
def test_every_real_offset_checkpoint():
    total = 0
    files = 0
    for name, kind in CHECKPOINT_FILES.items():
        for p in REAL_LOGS.rglob(name):
            data = p.read_bytes()
            rows = read_offset_checkpoint(data, checkpoint_kind(p.name))
            assert len(rows) == _naive_count(data), p
            assert all(r["checkpoint_kind"] == kind for r in rows)
            naive = [tuple(l.split()) for l in data.decode().splitlines()[2:]]
            assert [(r["topic"], str(r["partition"]), str(r["offset"])) for r in rows] == naive
            assert [r["line"] for r in rows] == list(range(3, 3 + len(rows)))
            total += len(rows)
            files += 1
    assert files == 79
    assert total > 2000


@pytest.mark.real_logs
def test_daniel_recovery_point_for_empty_transaction_state():
    # SOURCES.md: "recovery-point-offset-checkpoint says __transaction_state 44 0"
    data = (DANIEL / "kafka_data" / "recovery-point-offset-checkpoint").read_bytes()
    rows = read_offset_checkpoint(data, "recovery-point-offset")
    hit = [r for r in rows if (r["topic"], r["partition"]) == ("__transaction_state", 44)]
    assert len(hit) == 1 and hit[0]["offset"] == 0


@pytest.mark.real_logs
def test_every_real_leader_epoch_checkpoint():
    files = list(REAL_LOGS.rglob("leader-epoch-checkpoint"))
    assert len(files) == 1142
    total = 0
    for p in files:
        data = p.read_bytes()
        rows = read_leader_epoch_checkpoint(data)
        assert len(rows) == _naive_count(data), p
        starts = [r["start_offset"] for r in rows]
        epochs = [r["leader_epoch"] for r in rows]
        assert starts == sorted(starts) and epochs == sorted(set(epochs)), p
        total += len(rows)
    assert total > 1000


@pytest.mark.real_logs
def test_jeong_rae_leader_epochs():
    p = REAL_LOGS / "Jeong-Rae__KafkaDemo" / "kraft-combined-logs" / "__cluster_metadata-0" / "leader-epoch-checkpoint"
    rows = read_leader_epoch_checkpoint(p.read_bytes())
    assert [(r["leader_epoch"], r["start_offset"]) for r in rows] == [(1, 0), (2, 298), (3, 354), (5, 711), (6, 712)]


EXPECTED_META = {
    # folder (relative to REAL_LOGS): (version, broker_id, node_id, cluster_id) as stated in SOURCES.md
    "hermag__kafkademo/kafka/data": (0, 1001, None, None),
    "ItumelengMogase__Real-Time-Data-Pipeline-for-Patient-Admissions/kafka-data": (1, 1, 1, ...),
    "dschne27__kafka-streams/broker/data": (0, 1, None, ...),
    "NOVA-RICS-Open-Lab__agentic-data-pipelines/broker/data": (0, 1, None, ...),
    "SharaWeil__kafka-0.11.0/data": (0, 0, None, None),
    "ArthurArutunyan04__Backend_labs/kafka-data": (1, ..., ..., "universe-labs-cluster"),
    "Niloufar1171__LDI-POC": (1, ..., ..., ...),
}


@pytest.mark.real_logs
def test_every_real_meta_properties():
    files = list(REAL_LOGS.rglob("meta.properties"))
    assert len(files) == 20
    seen = {}
    for p in files:
        meta = read_meta_properties(p.read_bytes())
        rel = str(p.parent.relative_to(REAL_LOGS))
        seen[rel] = meta
        props = json.loads(meta["properties"])
        assert props["version"] == str(meta["version"])
        if meta["version"] == 1:
            assert meta["node_id"] == meta["broker_id"] == int(props["node.id"])
        else:
            assert meta["broker_id"] == int(props["broker.id"]) and meta["node_id"] is None
    for rel, (version, broker, node, cluster) in EXPECTED_META.items():
        got = seen[rel]
        assert got["version"] == version, rel
        if broker is not ...:
            assert got["broker_id"] == broker, rel
        if node is not ...:
            assert got["node_id"] == node, rel
        if cluster is not ...:
            assert got["cluster_id"] == cluster, rel
    # "directory.id present" for the KRaft dirs named in SOURCES.md
    assert seen["ItumelengMogase__Real-Time-Data-Pipeline-for-Patient-Admissions/kafka-data"]["directory_id"]
    assert seen["Niloufar1171__LDI-POC"]["directory_id"]
    # the CRLF copy (JY-GIEGIEGIE) parses without carriage returns in values
    jy = seen["JY-GIEGIEGIE__Stock-Sys-Integration/kafka-logs"]
    assert jy["version"] == 1 and jy["node_id"] == 1 and "\r" not in jy["cluster_id"]


@pytest.mark.real_logs
def test_every_real_partition_metadata():
    files = list(REAL_LOGS.rglob("partition.metadata"))
    assert len(files) == 1032
    for p in files:
        meta = read_partition_metadata(p.read_bytes())
        assert meta["version"] == 0 and len(meta["topic_id"]) == 22
        if p.parent.name == "__cluster_metadata-0":
            assert meta["topic_id"] == "AAAAAAAAAAAAAAAAAAAAAQ"  # Kafka's METADATA_TOPIC_ID


@pytest.mark.real_logs
def test_real_quorum_state_and_clean_shutdown():
    qs = list(REAL_LOGS.rglob("quorum-state"))
    assert len(qs) == 9
    for p in qs:
        q = read_quorum_state(p.read_bytes())
        assert q["leader_id"] == 1 and q["voted_id"] == -1 and q["leader_epoch"] >= 1
        assert json.loads(q["json"])["leaderEpoch"] == q["leader_epoch"]
    ronem = read_quorum_state((REAL_LOGS / "ronem123__rupia-transaction-service/kafka-logs/__cluster_metadata-0/quorum-state").read_bytes())
    assert "votedDirectoryId" in json.loads(ronem["json"])
    shut = list(REAL_LOGS.rglob(".kafka_cleanshutdown"))
    assert len(shut) == 8
    for p in shut:
        data = p.read_bytes()
        c = read_clean_shutdown(data)
        if data.strip():
            assert c["version"] == 0 and c["broker_epoch"] > 0
        else:
            assert c == {"version": None, "broker_epoch": None, "json": None}


# -- hand-built and malformed ---------------------------------------------------------

def test_offset_checkpoint_basic_and_crlf():
    data = b"0\r\n2\r\nmy-topic 3 1200\r\n__consumer_offsets 49 7\r\n"
    rows = read_offset_checkpoint(data, "replication-offset")
    assert rows == [
        {"checkpoint_kind": "replication-offset", "topic": "my-topic", "partition": 3, "offset": 1200, "line": 3},
        {"checkpoint_kind": "replication-offset", "topic": "__consumer_offsets", "partition": 49, "offset": 7, "line": 4},
    ]
    # no final newline, tabs/multiple spaces like Java's \s+ split
    assert read_offset_checkpoint(b"0\n1\nt\t0  9", "x")[0]["offset"] == 9


def test_empty_and_version_only_checkpoints():
    assert read_offset_checkpoint(b"", "cleaner-offset") == []
    assert read_offset_checkpoint(b"0\n", "cleaner-offset") == []
    assert read_offset_checkpoint(b"0\n0\n", "cleaner-offset") == []
    assert read_leader_epoch_checkpoint(b"") == []


@pytest.mark.parametrize(
    "data,kind,position",
    [
        (b"1\n0\n", "unknown-version", 0),
        (b"x\n0\n", "corrupt", 0),
        (b"0\n2\nt 0 5\n", "bad-length", 2),  # count says 2, one line
        (b"0\n1\nt 0 5\nu 1 6\n", "bad-length", 2),  # count says 1, two lines
        (b"0\n-1\n", "bad-length", 2),
        (b"0\nabc\n", "corrupt", 2),
        (b"0\n2\nt 0 5\nt zero 6\n", "corrupt", 10),
        (b"0\n1\nt 0 5x\n", "corrupt", 4),
        (b"0\n1\nt 0\n", "corrupt", 4),
        (b"0\n1\nt 0 5 9\n", "corrupt", 4),
        (b"0\n1\n t 0 5\n", "corrupt", 4),  # leading space: Java split gives an empty first token
        (b"0\n2\nt 0 5\n\n", "corrupt", 10),  # empty line is a malformed entry
        (b"0\n1\nt 2147483648 5\n", "corrupt", 4),  # partition beyond int32
        (b"0\n1\nt 1 9223372036854775808\n", "corrupt", 4),
        (b"0\n1\nt 1 1_000\n", "corrupt", 4),
        (b"0\n1\n\xff 1 1\n", "corrupt", 4),  # not UTF-8
    ],
)
def test_malformed_offset_checkpoints(data, kind, position):
    with pytest.raises(DecodeError) as e:
        read_offset_checkpoint(data, "recovery-point-offset")
    assert (e.value.kind, e.value.position) == (kind, position)


@pytest.mark.parametrize(
    "data,kind,position",
    [
        (b"0\n1\n5\n", "corrupt", 4),
        (b"0\n1\n5 6 7\n", "corrupt", 4),
        (b"0\n1\n2147483648 0\n", "corrupt", 4),
        (b"0\n3\n0 0\n1 5\n", "bad-length", 2),
        (b"2\n0\n", "unknown-version", 0),
    ],
)
def test_malformed_leader_epoch_checkpoints(data, kind, position):
    with pytest.raises(DecodeError) as e:
        read_leader_epoch_checkpoint(data)
    assert (e.value.kind, e.value.position) == (kind, position)


def test_leader_epoch_values():
    rows = read_leader_epoch_checkpoint(b"0\n2\n0 0\n-1 9223372036854775807\n")
    assert rows == [{"leader_epoch": 0, "start_offset": 0}, {"leader_epoch": -1, "start_offset": 2**63 - 1}]


def test_meta_properties_java_syntax():
    data = (
        b"# comment\n"
        b"  ! another comment\n"
        b"version : 1\n"
        b"node.id  7\n"
        b"cluster.id=abc\\\n"
        b"    def\n"
        b"directory.id=NuGZI-m8bJ7swnEKaplGaw\n"
        b"odd\\=key=caf\\u00e9\n"
        b"broker.id=9\n"
    )
    meta = read_meta_properties(data)
    assert meta["version"] == 1 and meta["node_id"] == 7 and meta["broker_id"] == 9
    assert meta["cluster_id"] == "abcdef"
    assert meta["directory_id"] == "NuGZI-m8bJ7swnEKaplGaw"
    assert json.loads(meta["properties"])["odd=key"] == "caf\u00e9"


def test_meta_properties_defaults_and_fallbacks():
    assert read_meta_properties(b"broker.id=3\n")["version"] == 0  # version defaults to 0
    m = read_meta_properties(b"version=0\n")
    assert m["broker_id"] is None and m["cluster_id"] is None
    m = read_meta_properties(b"version=1\nnode.id=4\n")
    assert m["broker_id"] == 4 and m["node_id"] == 4


@pytest.mark.parametrize(
    "data,kind,position",
    [
        (b"#x\nversion=2\nbroker.id=1\n", "unknown-version", 3),
        (b"version=one\n", "corrupt", 0),
        (b"version=0\nbroker.id=abc\n", "corrupt", 10),
        (b"version=1\ncluster.id=x\n", "corrupt", 0),  # v1 needs node.id
        (b"version=1\nnode.id=99999999999\n", "corrupt", 10),
        (b"version=1\nnode.id=1\ndirectory.id=short\n", "corrupt", 20),
        (b"version=1\nnode.id=1\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAA\n", "corrupt", 20),  # zero uuid
        (b"version=0\nbroker.id=1\nx=\\u12\n", "corrupt", 22),
    ],
)
def test_malformed_meta_properties(data, kind, position):
    with pytest.raises(DecodeError) as e:
        read_meta_properties(data)
    assert (e.value.kind, e.value.position) == (kind, position)


@pytest.mark.parametrize(
    "data,kind,position",
    [
        (b"", "truncated", 0),
        (b"version: 0\n", "truncated", 11),
        (b"version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "unknown-version", 0),
        (b"version 0 x\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "corrupt", 0),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "corrupt", 11),
        (b"version: 0\ntopic_id: AAAA", "corrupt", 11),
        (b"version: 0\ntopic_id AAAAAAAAAAAAAAAAAAAAAQ extra", "corrupt", 11),
    ],
)
def test_malformed_partition_metadata(data, kind, position):
    with pytest.raises(DecodeError) as e:
        read_partition_metadata(data)
    assert (e.value.kind, e.value.position) == (kind, position)


def test_partition_metadata_crlf():
    m = read_partition_metadata(b"version: 0\r\ntopic_id: 0CM0rYlfQiqSTCH-x54Zhw\r\n")
    assert m == {"version": 0, "topic_id": "0CM0rYlfQiqSTCH-x54Zhw"}


def test_quorum_state_and_clean_shutdown_malformed():
    q = read_quorum_state(b'{"votedId": 3}')
    assert (q["leader_id"], q["leader_epoch"], q["voted_id"]) == (None, None, 3)
    for bad in (b"{", b"[1]", b'{"leaderId": "1"}', b'{"leaderEpoch": 1.5}', b'{"leaderId": true}', b"\xff",
                b'{"leaderId": NaN}'):
        with pytest.raises(DecodeError) as e:
            read_quorum_state(bad)
        assert e.value.kind == "corrupt"
    with pytest.raises(DecodeError) as e:
        read_quorum_state(b'{"a": 1,, }')
    assert e.value.position == 8
    assert read_clean_shutdown(b"\n") == {"version": None, "broker_epoch": None, "json": None}
    assert read_clean_shutdown(b'{"version":0,"brokerEpoch":42}\n')["broker_epoch"] == 42
    with pytest.raises(DecodeError):
        read_clean_shutdown(b"clean")


def test_checkpoint_kind_names():
    assert checkpoint_kind("replication-offset-checkpoint") == "replication-offset"
    assert checkpoint_kind("/d/log-start-offset-checkpoint") == "log-start-offset"
    assert checkpoint_kind("leader-epoch-checkpoint") is None


# -- robustness ----------------------------------------------------------------------

_READERS = [
    lambda d: read_offset_checkpoint(d, "replication-offset"),
    read_leader_epoch_checkpoint,
    read_meta_properties,
    read_partition_metadata,
    read_quorum_state,
    read_clean_shutdown,
]


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=120))
def test_random_bytes_only_raise_decode_error(data):
    for fn in _READERS:
        try:
            fn(data)
        except DecodeError:
            pass


_TEXT_SEEDS = [
    b"0\n2\nmy-topic 3 1200\n__consumer_offsets 49 7\n",
    b"0\n3\n1 0\n2 298\n3 354\n",
    b"#\nversion=1\nnode.id=1\ndirectory.id=NuGZI-m8bJ7swnEKaplGaw\ncluster.id=x\n",
    b"version: 0\ntopic_id: 0CM0rYlfQiqSTCH-x54Zhw",
    b'{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1}',
]


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(_TEXT_SEEDS), st.data())
def test_mutated_text_only_raises_decode_error(seed, data):
    buf = bytearray(seed)
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.sampled_from(b" \t\r\n0123456789-+=:#!\\u{}\",ax\xff\x00"))
    for fn in _READERS:
        try:
            fn(bytes(buf))
        except DecodeError:
            pass
