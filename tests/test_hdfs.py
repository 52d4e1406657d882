"""Inputs in a real HDFS: a NameNode and a DataNode of Apache Hadoop (the Maven Central jars
``scripts/hdfs/fetch.sh`` resolves, started by ``scripts/hdfs/harness.py`` on 127.0.0.1; one
for this module, stopped at its end).

* ``scan hdfs://.../sample_logs`` reports exactly what ``scan sample_logs`` reports from local
  disk (every scenario at once: every finding, its evidence and the summary; paths aside), and
  the ``files`` inventory lists every file with the same status.
* ``batch`` over a log dir in HDFS and over its local twin, through the same three runs: the
  first (every file decoded), an unchanged one (nothing decoded) and one after the broker's
  changes were copied over — the active segment *appended to* in HDFS, a rolled segment, a
  deleted one, a new partition, a checkpoint rewritten with the same size and modification
  time. Same change sets, same tables (= what the decoders read from the local files), same
  findings history.
* ``s3a://``: the same ingest from an S3-compatible server (moto's, on 127.0.0.1), when moto
  is installed (the ``dev`` extras).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from batch_support import build_v1, decoder_rows, mutate_to_v2
from conftest import SAMPLE_LOGS
from auditor.batch.job import run_batch
from auditor.cli.main import cli
from auditor.tables.source import arrow_dataset
from auditor.ingest import storage
from auditor.ingest.tables import TABLES

from scripts.hdfs.harness import MiniHdfs, mirror

pytestmark = pytest.mark.spark

RULES = ("hanging-transaction", "stuck-lso")  # what the log dir's changes open and resolve (as in test_batch_job)
WALL_CLOCK = ("decoded_at_ms", "first_seen_ms", "last_seen_ms", "resolved_at_ms", "finding_key", "mtime_ms")


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory):
    from hdfs_native import Client

    with MiniHdfs(tmp_path_factory.mktemp("hdfs")) as h:
        client = Client(h.url)
        mirror(client, SAMPLE_LOGS, "/kafka/sample_logs")
        yield h, client
    storage.reset_clients()


def _local(value, remote: str, local: str):
    """``value`` (any JSON-able structure) with the remote root spelled as the local one."""
    return json.loads(json.dumps(value, default=str).replace(remote, local))


def _scan(inp: str, out) -> dict:
    res = CliRunner().invoke(cli, ["scan", inp, "--tables", str(out / "tables"), "--out", str(out / "findings"),
                                   "--format", "json", "--quiet"])
    assert res.exit_code == 1, res.output  # the scenarios hold error-severity findings
    return json.loads(res.stdout)


def test_scan_from_hdfs_reports_what_local_disk_reports(hdfs, spark, tmp_path):
    h, _ = hdfs
    remote = h.url + "/kafka/sample_logs"
    local = _scan(str(SAMPLE_LOGS), tmp_path / "local")
    got = _scan(remote, tmp_path / "hdfs")
    assert got["inputs"] == [remote]
    assert len(local["findings"]) > 10

    def canon(doc):
        return sorted(json.dumps({k: v for k, v in f.items() if k != "finding_key"}, sort_keys=True)
                      for f in doc["findings"])

    assert canon(_local(got, remote, str(SAMPLE_LOGS))) == canon(local)
    run_ids = ("run_id", "ingest_run_id")
    assert ({k: v for k, v in _local(got["summary"], remote, str(SAMPLE_LOGS)).items() if k not in run_ids}
            == {k: v for k, v in local["summary"].items() if k not in run_ids})
    files = {name: _rows(tmp_path / name / "tables", "files", remote, str(SAMPLE_LOGS)) for name in ("local", "hdfs")}
    assert files["hdfs"] == files["local"] and len(files["local"]) > 1800


def test_index_splits_and_decode_from_hdfs(hdfs):
    """Segments split at their .index entries (read from HDFS): the same byte ranges, and the
    same rows and problems per range as from local disk (the decode tasks alone, no Spark)."""
    import pyarrow as pa

    from auditor.ingest import envelope
    from auditor.ingest.plan import make_plan

    h, _ = hdfs
    local = str(SAMPLE_LOGS)
    remote = h.url + "/kafka/sample_logs"
    plans = {k: make_plan([inp], 512) for k, inp in (("local", local), ("hdfs", remote))}
    ranges = {k: sorted((_local(t["path"], remote, local), t["range_start"], t["range_end"]) for t in p.tasks)
              for k, p in plans.items()}
    assert ranges["hdfs"] == ranges["local"] and sum(r[1] > 0 for r in ranges["local"]) >= 30
    decoded = {}
    for k, plan in plans.items():
        env = pa.Table.from_batches([rb for t in plan.tasks for rb in envelope.decode_task_all(t)],
                                    schema=envelope.ENVELOPE_SCHEMA)
        decoded[k] = {n: sorted(json.dumps(r, sort_keys=True, default=str).replace(remote, local)
                                for r in t.to_pylist()) for n, t in envelope.tables_of(env, list(TABLES)).items()}
        decoded[k]["problems"] = sorted(json.dumps(r, default=str).replace(remote, local)
                                        for r in env.select(envelope.SUMMARY_COLUMNS).to_pylist() if r["problem_kind"])
    assert decoded["hdfs"] == decoded["local"]


def _rows(root, name: str, remote: str, local: str) -> list[str]:
    """Table ``name`` under ``root`` (Parquet parts, or a Delta table's current version: read
    without Spark), rows as sorted JSON, the remote root spelled as the local one."""
    rows = arrow_dataset(root, name).to_table().to_pylist()
    return sorted(json.dumps({k: v for k, v in r.items() if k not in WALL_CLOCK}, sort_keys=True, default=str)
                  .replace(remote, local) for r in rows)


def _state(wh, remote: str, local: str) -> dict:
    out = {n: _rows(wh / "tables", n, remote, local) for n in (*TABLES, "files")}
    for n in ("ledger", "findings"):
        out[n] = _rows(wh, n, remote, local)
    return out


def _summary(res) -> dict:
    s = res.summary()
    return {k: s[k] for k in ("run", "files_seen", "files_decoded", "files_gone", "rows_written", "table_rows_written",
                              "findings", "rebuilt", "audited", "bad_files")}


@pytest.fixture(scope="module")
def batch_runs(hdfs, spark, tmp_path_factory):
    """Three runs over a log dir in HDFS and the same three over its local twin."""
    h, client = hdfs
    root = tmp_path_factory.mktemp("batch")
    log = build_v1(root / "logs")
    remote_path = "/kafka/batch/broker-1"
    remote = h.url + remote_path
    out = {"remote": remote, "local": str(log), "runs": []}
    changes = {}
    for step in ("first", "unchanged", "changed"):
        if step == "changed":
            before = {p: (s.length, s.modification_time) for p in [f"{remote_path}/replication-offset-checkpoint"]
                      for s in [client.get_file_info(p)]}
            mutate_to_v2(log)
            changes = mirror(client, log.parent, remote_path.rsplit("/", 1)[0], keep_mtime={"broker-1/replication-offset-checkpoint"})
            after = client.get_file_info(f"{remote_path}/replication-offset-checkpoint")
            out["checkpoint_same_size_and_mtime"] = before[f"{remote_path}/replication-offset-checkpoint"] == (
                after.length, after.modification_time)
        elif step == "first":
            mirror(client, log.parent, remote_path.rsplit("/", 1)[0])
        pair = {}
        for name, inp, wh in (("local", str(log), root / "wh-local"), ("hdfs", remote, root / "wh-hdfs")):
            res = run_batch(spark, [inp], str(wh), only=RULES)
            pair[name] = (_summary(res), _state(wh, remote, str(log)))
        pair["decoded"] = decoder_rows([str(log)])
        out["runs"].append(pair)
    out["changes"] = changes
    return out


def test_batch_runs_from_hdfs_equal_runs_from_local_disk(batch_runs):
    remote, local = batch_runs["remote"], batch_runs["local"]
    for i, pair in enumerate(batch_runs["runs"]):
        (want, want_state), (got, got_state) = pair["local"], pair["hdfs"]
        assert _local(got, remote, local) == want, f"run {i + 1}"
        for name, rows in want_state.items():
            assert got_state[name] == rows, f"run {i + 1}: {name}"
        for name in TABLES:
            assert len(got_state[name]) == len(pair["decoded"][name]), f"run {i + 1}: {name}"


def test_batch_on_hdfs_is_incremental(batch_runs):
    first, unchanged, changed = (r["hdfs"][0] for r in batch_runs["runs"])
    assert first["rebuilt"] and first["files_decoded"] == first["files_seen"] >= 6
    assert first["findings"]["open"] >= 2  # the hanging transactions of pids 9 and 11
    assert (unchanged["files_decoded"], unchanged["rows_written"], unchanged["audited"]) == (0, 0, False)
    assert batch_runs["changes"] == {
        "broker-1/orders-0/00000000000000000004.log": "appended", "broker-1/orders-0/00000000000000000008.log": "new",
        "broker-1/orders-2/00000000000000000000.log": "new", "broker-1/orders-1/00000000000000000000.log": "deleted",
        "broker-1/replication-offset-checkpoint": "rewritten"}
    assert batch_runs["checkpoint_same_size_and_mtime"]  # only its content tells: the fingerprint must
    assert not changed["rebuilt"] and changed["files_gone"] == 1
    # the appended segment, the rolled one, the new partition's, the checkpoint, orders-1 now an empty dir
    assert changed["files_decoded"] == 5
    assert changed["findings"]["resolved"] >= 1  # pid 9's transaction was aborted by the appended marker


@pytest.fixture
def s3(monkeypatch, spark):
    """moto's S3-compatible server on 127.0.0.1, and the AWS settings for the driver and executors."""
    from moto.server import ThreadedMotoServer  # dev extras: `make test` installs it, so its absence fails

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    executors = spark.sparkContext.environment  # what spark.executorEnv.* sets, for the Python workers
    saved = dict(executors)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
        executors[k] = v
    storage.reset_clients()
    try:
        yield server
    finally:
        executors.clear()
        executors.update(saved)
        storage.reset_clients()
        server.stop()


def test_ingest_from_s3_equals_ingest_from_local_disk(s3, spark, tmp_path):
    from pyarrow import fs

    from auditor.ingest.spark_job import ingest

    src = SAMPLE_LOGS / "hanging-late-write"
    s3fs = fs.S3FileSystem(**storage.s3_options(), allow_bucket_creation=True)
    s3fs.create_dir("logs")
    for p in src.rglob("*"):
        if p.is_file():
            with s3fs.open_output_stream(f"logs/{p.relative_to(SAMPLE_LOGS)}") as w:
                w.write(p.read_bytes())
    remote = "s3a://logs/hanging-late-write"
    tables = {}
    for name, inp in (("local", str(src)), ("s3", remote)):
        res = ingest(spark, [inp], str(tmp_path / name))
        assert not res.bad_files
        tables[name] = {t: _rows(tmp_path / name, t, remote, str(src)) for t in (*TABLES, "files")}
    assert tables["s3"] == tables["local"]
    assert sum(len(v) for v in tables["local"].values()) > 100


# -- tiered storage: the remote store in HDFS / S3 -------------------------------------------------

TIERED = SAMPLE_LOGS / "tiered-storage"


def _tiered_scan(store: str, out) -> tuple[dict, dict]:
    """``scan broker-1 --remote-store STORE`` (the log dir local, the store wherever ``store`` is):
    its JSON report and its tables."""
    res = CliRunner().invoke(cli, ["scan", str(TIERED / "broker-1"), "--remote-store", store, "--tables",
                                   str(out / "tables"), "--out", str(out / "findings"), "--format", "json", "--quiet"])
    assert res.exit_code == 1, res.output  # findings at error severity and above
    local = str(TIERED / "remote-store")
    return json.loads(res.stdout), {t: _rows(out / "tables", t, store, local) for t in (*TABLES, "files")}


def _same_tiered(doc: dict, tables: dict, ref_doc: dict, ref_tables: dict, store: str) -> None:
    local = str(TIERED / "remote-store")

    def canon(d):
        return sorted(json.dumps({k: v for k, v in f.items() if k != "finding_key"}, sort_keys=True)
                      for f in _local(d, store, local)["findings"])

    assert canon(doc) == canon(ref_doc) and any(f["rule"] == "hanging-transaction" for f in ref_doc["findings"])
    assert tables == ref_tables
    # the remote store was read: its segments' batches and producer snapshots are in the tables
    assert sum(1 for r in ref_tables["files"] if '"dir_status": "remote"' in r) >= 50
    assert sum(1 for r in ref_tables["producer_snapshots"] if '"remote_segment_id": null' not in r) >= 10


def test_remote_store_in_hdfs_reads_like_the_local_one(hdfs, spark, tmp_path):
    """``--remote-store hdfs://...`` (the tiered capture's LocalTieredStorage directory in HDFS) gives
    the tables and findings ``--remote-store <local path>`` gives."""
    h, _ = hdfs
    store = h.url + "/kafka/sample_logs/tiered-storage/remote-store"
    ref = _tiered_scan(str(TIERED / "remote-store"), tmp_path / "local")
    got = _tiered_scan(store, tmp_path / "hdfs")
    _same_tiered(*got, *ref, store)


def test_remote_store_in_s3_reads_like_the_local_one(s3, spark, tmp_path):
    """The same store in an S3-compatible server (moto's): ``--remote-store s3a://...``."""
    from pyarrow import fs

    s3fs = fs.S3FileSystem(**storage.s3_options(), allow_bucket_creation=True)
    s3fs.create_dir("tiered")
    src = TIERED / "remote-store"
    for p in src.rglob("*"):
        if p.is_file():
            with s3fs.open_output_stream(f"tiered/{p.relative_to(TIERED)}") as w:
                w.write(p.read_bytes())
    store = "s3a://tiered/remote-store"
    ref = _tiered_scan(str(src), tmp_path / "local")
    got = _tiered_scan(store, tmp_path / "s3")
    _same_tiered(*got, *ref, store)
