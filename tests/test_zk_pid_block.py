"""Tests for auditor.formats.zk_pid_block (ZooKeeper /latest_producer_id_block export).

Ground truth: the znode JSON layout of docs/on-disk-format.md §5.3
(``{"version":1,"broker":<int>,"block_start":"<long>","block_end":"<long>"}``),
written out by hand here, alone and embedded in zookeeper-shell output.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from auditor.errors import DecodeError
from auditor.formats.zk_pid_block import COLUMNS, decode_zk_pid_block

ZNODE = b'{"version":1,"broker":0,"block_start":"0","block_end":"999"}'


def test_plain_znode_json():
    row = decode_zk_pid_block(ZNODE)
    assert row == {"version": 1, "broker_id": 0, "block_start": 0, "block_end": 999}
    assert list(row) == [c.name for c in COLUMNS]


def test_numbers_instead_of_strings_and_whitespace():
    data = b'\n  {\n  "version": 1,\n  "broker": 3,\n  "block_start": 5000,\n  "block_end": 5999\n}\n'
    assert decode_zk_pid_block(data) == {"version": 1, "broker_id": 3, "block_start": 5000, "block_end": 5999}


def test_large_ids_as_strings():
    data = json.dumps({"version": 1, "broker": 2, "block_start": "9223372036854774808",
                       "block_end": "9223372036854775807"}).encode()
    row = decode_zk_pid_block(data)
    assert row["block_start"] == 2**63 - 1000 and row["block_end"] == 2**63 - 1


def test_zookeeper_shell_output():
    data = (
        b"Connecting to zookeeper:2181\n"
        b"\n"
        b"WATCHER::\n"
        b"\n"
        b"WatchedEvent state:SyncConnected type:None path:null\n"
        b'{"version":1,"broker":1001,"block_start":"3000","block_end":"3999"}\n'
        b"cZxid = 0x1a\n"
        b"ctime = Mon Jan 01 00:00:00 UTC 2024\n"
        b"dataVersion = 3\n"
    )
    assert decode_zk_pid_block(data) == {"version": 1, "broker_id": 1001, "block_start": 3000, "block_end": 3999}


def test_migration_placeholder_broker_minus_one():
    data = b'{"version":1,"broker":-1,"block_start":"7000","block_end":"7999"}'
    assert decode_zk_pid_block(data)["broker_id"] == -1


def test_bad_json_reports_byte_position():
    data = b'{"version":1,"broker":0,"block_start":"0",,}'
    with pytest.raises(DecodeError) as ei:
        decode_zk_pid_block(data)
    assert ei.value.kind == "corrupt"
    assert ei.value.position == data.index(b",,") + 1
    # position counts bytes, not characters, after multi-byte text
    prefix = "h\u00e9llo \u00e9t\u00e9\n".encode()
    with pytest.raises(DecodeError) as ei:
        decode_zk_pid_block(prefix + data)
    assert ei.value.position == len(prefix) + data.index(b",,") + 1


@pytest.mark.parametrize("missing", ["version", "broker", "block_start", "block_end"])
def test_missing_field(missing):
    obj = {"version": 1, "broker": 0, "block_start": "0", "block_end": "999"}
    del obj[missing]
    data = b"zk> " + json.dumps(obj).encode()
    with pytest.raises(DecodeError) as ei:
        decode_zk_pid_block(data)
    assert missing in ei.value.message
    assert ei.value.position == 4  # where the JSON object starts


def test_end_below_start():
    with pytest.raises(DecodeError) as ei:
        decode_zk_pid_block(b'{"version":1,"broker":0,"block_start":"2000","block_end":"1999"}')
    assert "below" in ei.value.message and ei.value.position == 0


@pytest.mark.parametrize(
    "data,kind",
    [
        (b'{"version":2,"broker":0,"block_start":"0","block_end":"9"}', "unknown-version"),
        (b'{"version":1,"broker":true,"block_start":"0","block_end":"9"}', "corrupt"),
        (b'{"version":1,"broker":0,"block_start":"0x10","block_end":"99"}', "corrupt"),
        (b'{"version":1,"broker":0,"block_start":1.5,"block_end":"99"}', "corrupt"),
        (b'{"version":1,"broker":0,"block_start":"-5","block_end":"99"}', "corrupt"),
        (b'{"version":1,"broker":0,"block_start":"0","block_end":"9223372036854775808"}', "corrupt"),
        (b"no json here", "corrupt"),
        (b"", "corrupt"),
        (b"\xff\xfe{}", "corrupt"),
        (b"[1,2,3]", "corrupt"),
    ],
)
def test_rejects(data, kind):
    with pytest.raises(DecodeError) as ei:
        decode_zk_pid_block(data)
    assert ei.value.kind == kind


def test_oversized_input():
    with pytest.raises(DecodeError) as ei:
        decode_zk_pid_block(b" " * (1 << 20) + ZNODE)
    assert ei.value.kind == "bad-length"


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_decode_error(data):
    try:
        decode_zk_pid_block(data)
    except DecodeError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_mutated_znode_only_decode_error(data):
    buf = bytearray(b"WatchedEvent state:SyncConnected\n" + ZNODE + b"\ncZxid = 0x1a\n")
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    try:
        row = decode_zk_pid_block(bytes(buf[: data.draw(st.integers(0, len(buf)))]))
    except DecodeError:
        return
    assert row["block_start"] <= row["block_end"]


def test_row_fits_arrow_schema():
    import pyarrow as pa

    t = pa.Table.from_pylist([decode_zk_pid_block(ZNODE)], schema=pa.schema(COLUMNS))
    assert t.column("block_end")[0].as_py() == 999
