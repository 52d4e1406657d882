"""The file-access layer (auditor/ingest/storage.py): URI spelling, the remote file's
bounded reads, and a remote store end to end without a server.

A store backed by a local directory (``hdfs://fake-nn/...``) goes through every
remote code path — discovery over listings (RemotePath), planning, the decoders
over RemoteFile (segments read in windows instead of memory-mapped, one open per
file for all its tables), the ledger's fingerprints — and must give exactly what
the same files give from local disk. tests/test_hdfs.py does the same against a
real HDFS."""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pytest

from conftest import SAMPLE_LOGS
from auditor.formats import batch_columnar
from auditor.ingest import envelope, storage
from auditor.ingest.inventory import build_inventory
from auditor.ingest.plan import make_plan
from auditor.ingest.storage import RemoteFile, Status, is_remote, join, local_path, normalize
from auditor.ingest.tables import TABLES

FAKE = "hdfs://fake-nn"


def test_uri_spelling():
    assert normalize("file:///var/lib/kafka/") == "/var/lib/kafka"
    assert normalize("file://localhost/var/lib/kafka") == "/var/lib/kafka"
    assert normalize("rel/dir") == os.path.abspath("rel/dir")
    assert normalize("hdfs://nn:8020/logs/./a/../b/") == "hdfs://nn:8020/logs/b"
    assert normalize("hdfs:///logs") == "hdfs:///logs"
    assert normalize("hdfs://nn:8020/") == "hdfs://nn:8020"
    assert normalize("s3a://bucket//kafka/") == "s3a://bucket/kafka"
    for bad, why in (("ftp://h/x", "mount"), ("s3a:///x", "bucket"), ("file://otherhost/x", "mount")):
        with pytest.raises(ValueError, match=why):
            normalize(bad)
    assert local_path("s3a://b/x") is None and local_path("file:/x") == "/x"
    assert is_remote("hdfs://nn/x") and is_remote("s3a://b/x") and not is_remote("/x") and not is_remote("file:///x")
    assert join("hdfs://nn/a", "b") == "hdfs://nn/a/b" and join("/a", "b") == "/a/b"


def test_remote_file_reads_in_bounded_blocks():
    data = bytes(range(256)) * 400  # 102,400 bytes
    asked: list[tuple[int, int]] = []

    def read_at(pos, n):
        asked.append((pos, n))
        return data[pos:pos + n]

    f = RemoteFile("x", read_at, len(data), block=4096)
    for pos, n in ((0, 10), (4090, 20), (8000, 5000), (100_000, 5000), (0, 0)):
        f.seek(pos)
        assert f.read(n) == data[pos:pos + n]
    assert max(n for _, n in asked) == 4096  # whole blocks only, at most two kept
    f.seek(-16, os.SEEK_END)
    buf = bytearray(32)
    assert f.readinto(buf) == 16 and bytes(buf[:16]) == data[-16:]
    assert f.read(10) == b"" and f.pread(200, 3) == data[200:203] and f.tell() == len(data)
    asked.clear()
    assert f.pread(1000, 50_000) == data[1000:51_000]
    assert asked == [(1000, 50_000)]  # bigger than two blocks: straight from the store
    with pytest.raises(OSError):
        f.seek(-1)


def test_remote_file_asks_the_store_for_small_ranges(monkeypatch):
    data = bytes(range(256)) * 400
    asked: list[int] = []

    def read_at(pos, n):
        asked.append(n)
        return data[pos:pos + n]

    monkeypatch.setattr(storage, "FETCH", 1000)
    f = RemoteFile("x", read_at, len(data), block=4096)
    f.seek(3000)
    assert f.read(9000) == data[3000:12_000] and f.pread(0, 60_000) == data[:60_000]
    assert max(asked) == 1000 and isinstance(f.pread(5, 5000), bytes)


class DirStore(storage._Store):
    """A remote store whose files are a local directory tree: ``hdfs://fake-nn/<abs path>``."""

    def __init__(self) -> None:
        self.largest_read = 0
        self.opens = 0

    @staticmethod
    def _status(path: str) -> Status:
        st = os.stat(path)
        return Status(path, os.path.isdir(path), 0 if os.path.isdir(path) else st.st_size, st.st_mtime_ns // 1_000_000)

    def stat(self, path):
        return self._status(path)

    def list(self, path):
        return [self._status(os.path.join(path, n)) for n in os.listdir(path)]

    def open(self, path):
        if os.path.isdir(path):
            raise IsADirectoryError(21, "Path is not a file", path)
        f = open(path, "rb")
        self.opens += 1

        def read_at(pos, n):
            self.largest_read = max(self.largest_read, n)
            f.seek(pos)
            return f.read(n)

        return read_at, os.fstat(f.fileno()).st_size, f.close


@pytest.fixture
def fake(monkeypatch):
    store = DirStore()
    monkeypatch.setitem(storage._STORES, ("hdfs", "fake-nn"), store)
    return store


def _local(v):
    return v[len(FAKE):] if isinstance(v, str) and v.startswith(FAKE + "/") else v


def _decode(inputs: list[str], split_bytes: int = 128 << 20, *, all_columnar: bool = False):
    plan = make_plan(inputs, split_bytes)
    tasks = [{**t, "active": False} if all_columnar and t["kind"] == "segment" else t for t in plan.tasks]
    env = pa.Table.from_batches([rb for t in tasks for rb in envelope.decode_task_all(t)],
                                schema=envelope.ENVELOPE_SCHEMA)
    s = envelope.summarize(env.select(envelope.SUMMARY_COLUMNS).to_pylist())
    tables = {n: sorted(repr(sorted((k, _local(v)) for k, v in r.items())) for r in t.to_pylist())
              for n, t in envelope.tables_of(env, list(TABLES)).items()}
    inventory = sorted(repr(sorted((k, _local(v)) for k, v in r.items() if k != "mtime_ms"))
                       for r in build_inventory(plan.files, s.counts, s.problems, s.next_offsets))
    return plan, tables, inventory


def _same(local: str, **kw) -> list[str]:
    _, want_tables, want_inv = _decode([local], **kw)
    plan, got_tables, got_inv = _decode([FAKE + local], **kw)
    assert all(is_remote(fi.path) for fi in plan.files)
    assert got_inv == want_inv
    for name in TABLES:
        assert got_tables[name] == want_tables[name], name
    assert sum(map(len, want_tables.values())) > 0
    return want_inv


def test_a_remote_store_gives_what_local_disk_gives(fake):
    _same(str(SAMPLE_LOGS))
    assert fake.largest_read <= storage.BLOCK


def test_remote_segments_in_small_windows_and_blocks(fake, monkeypatch):
    """Every segment through the windowed columnar path, with windows and blocks far smaller
    than the batches: entries across windows, a window that must grow, the per-object tail."""
    monkeypatch.setattr(batch_columnar, "WINDOW", 300)
    monkeypatch.setattr(batch_columnar, "MAX_WINDOW", 700)
    monkeypatch.setattr(storage, "BLOCK", 512)
    for name in ("clean", "legacy-message-formats", "open-at-crash"):
        _same(str(SAMPLE_LOGS / name), all_columnar=True)
    assert fake.largest_read <= 1 << 20  # no read bigger than a decoder's own chunk


def test_damaged_files_report_the_same_problems_remotely(fake, tmp_path):
    src = SAMPLE_LOGS / "clean" / "broker-1" / "__transaction_state-0" / "00000000000000000000.log"
    part = tmp_path / "broker-1" / "__transaction_state-0"
    part.mkdir(parents=True)
    data = src.read_bytes()
    (part / "00000000000000000000.log").write_bytes(data[:len(data) - 7])  # torn tail
    bad = bytearray(data)
    bad[8:12] = (7).to_bytes(4, "big")  # a length below the minimum
    (part / "00000000000000000100.log").write_bytes(bytes(bad))
    (part / "00000000000000000200.log").write_bytes(data + bytes(4096))  # a zero-filled tail
    shutil.copy(SAMPLE_LOGS / "clean" / "broker-1" / "meta.properties", tmp_path / "broker-1")
    inv = _same(str(tmp_path), all_columnar=True)
    assert sum("('status', 'truncated')" in r or "('status', 'foreign')" in r for r in inv) == 2
    _same(str(tmp_path))


def test_split_segments_by_their_remote_index(fake):
    """Index-based splits read the .index through the store: the same byte ranges as locally."""
    local = str(SAMPLE_LOGS / "clean")
    ranges = sorted((t["path"], t["range_start"], t["range_end"]) for t in make_plan([local], 512).tasks)
    remote = sorted((_local(t["path"]), t["range_start"], t["range_end"]) for t in make_plan([FAKE + local], 512).tasks)
    assert remote == ranges and any(r[1] > 0 for r in ranges)
    _same(local, split_bytes=512)


def test_one_open_per_remote_file(fake):
    local = str(SAMPLE_LOGS / "hanging-late-write")
    plan = make_plan([FAKE + local])
    fake.opens = 0
    for t in plan.tasks:
        for _ in envelope.decode_task_all(t):
            pass
    assert fake.opens == len(plan.tasks)


def test_fingerprints_of_remote_files_equal_local_ones(fake):
    from auditor.batch.ledger import fingerprints

    local = str(SAMPLE_LOGS / "compacted-transactions")
    want = fingerprints(make_plan([local]).files)
    got = fingerprints(make_plan([FAKE + local]).files)
    assert {_local(p): fp for p, fp in got.items()} == want
    assert sum(fp is not None for fp in want.values()) > 100


def test_missing_remote_input_and_unreadable_file(fake, tmp_path):
    plan = make_plan([f"{FAKE}{tmp_path}/nope"])
    assert [(f.kind, f.note) for f in plan.files] == [("missing", "input path does not exist")]


def test_a_store_that_cannot_be_asked_is_not_a_missing_input(fake, monkeypatch, tmp_path):
    from auditor.batch.job import InputError, check_inputs

    def refuse(path):
        raise OSError(5, "Connection refused (os error 111)", path)

    monkeypatch.setattr(fake, "stat", refuse)
    root = f"{FAKE}{tmp_path}"
    plan = make_plan([root])
    assert [(f.kind, f.note) for f in plan.files] == [("unreadable-dir", "cannot stat: Connection refused (os error 111)")]
    with pytest.raises(InputError, match="cannot be read"):
        check_inputs(plan, [], [root], False)


def test_single_remote_files_and_partition_dirs(fake):
    part = SAMPLE_LOGS / "clean" / "broker-1" / "__transaction_state-0"
    _same(str(part))
    _same(str(part / "00000000000000000000.log"))


@pytest.mark.parametrize("cmd", [["ingest", "--out", "/tmp/never"], ["scan"]])
def test_an_input_of_another_scheme_is_a_usage_error(cmd):
    from click.testing import CliRunner

    from auditor.cli.main import cli

    res = CliRunner().invoke(cli, [*cmd, "ftp://host/kafka"])
    assert res.exit_code == 2 and "hdfs:// or s3a://" in res.output, res.output
