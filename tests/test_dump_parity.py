"""Differential test: our decoders against Kafka's own DumpLogSegments on the same files.

Every segment, KRaft snapshot, producer snapshot, index and transaction index
in ``sample_logs/`` and ``../shared/real_logs/`` is dumped by Kafka's tool
(from the jars the project resolves from Maven Central) and compared field by
field with what our table decoders produce for the same file. Agreement must
be 100%; each known difference in how the two *print* a value is handled below
with its reason. The figures (files, batches, records compared) are printed and
written to build/parity.json.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from conftest import PROJECT, REAL_LOGS, SAMPLE_LOGS
from dumptool import parse, run_dump
from auditor.formats.batch import is_zero_range
from auditor.formats.metadata import _SCHEMAS as SCHEMAS
from auditor.ingest import segments
from auditor.ingest.plan import make_plan
from auditor.ingest.tables import TABLES, iter_rows

INTERNAL = {"__transaction_state": "--transaction-log-decoder", "__consumer_offsets": "--offsets-decoder",
            "__cluster_metadata": "--cluster-metadata-decoder"}
COUNTS: Counter = Counter()
LEGACY_WRAPPERS: set[tuple[int, str]] = set()  # (magic, codec) of the compressed legacy wrappers compared


def _tasks(roots: list[Path]) -> list[dict]:
    plan = make_plan([str(r) for r in roots], split_bytes=1 << 62)
    # the tool skips files it does not know by their suffix: a cleaner's *.log.deleted, *.cleaned, *.swap
    return [t for t in plan.tasks if t["size"] > 0 and not t["path"].endswith((".deleted", ".cleaned", ".swap"))]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[dict]:
    roots = [SAMPLE_LOGS, REAL_LOGS]
    # kafka-python's legacy (v0/v1) fixtures: the dump tool only reads *.log names
    legacy = tmp_path_factory.mktemp("legacy")
    for name in ("record_batch_data_v0", "record_batch_data_v1", "record_batch_data_v2", "control_batch_data_v2"):
        d = legacy / f"{name.replace('_', '')}-0"
        d.mkdir()
        shutil.copy(REAL_LOGS / "dpkp__kafka-python/extracted/test/record/test_records.py" / f"{name}.bin",
                    d / "00000000000000000000.log")
    roots.append(legacy)
    return _tasks(roots)


def _group(tasks: list[dict]) -> dict[tuple[str, ...], list[dict]]:
    groups: dict[tuple[str, ...], list[dict]] = {}
    for t in tasks:
        if t["kind"] in ("segment", "kraft-snapshot"):
            flag = INTERNAL.get(t["topic"] or "", "--deep-iteration")
            if t["kind"] == "kraft-snapshot":
                flag = "--cluster-metadata-decoder"
            groups.setdefault((flag,), []).append(t)
        elif t["kind"] in ("producer-snapshot", "txn-index", "offset-index", "time-index"):
            log = Path(t["path"]).with_suffix(".log")
            if t["kind"] in ("offset-index", "time-index") and (not log.exists() or log.stat().st_size == 0):
                # the tool cross-checks an index against its segment and fails without one
                # (real_logs keeps a few indexes whose .log was never committed), and it throws
                # NoSuchElementException on the all-zero preallocated index of an empty segment
                # (a crashed broker's active segment, sample_logs/open-at-crash)
                continue
            groups.setdefault((), []).append(t)
    return groups


@pytest.fixture(scope="module")
def dumped(corpus) -> tuple[dict[str, list[dict]], dict]:
    groups = _group(corpus)
    out: dict = {}
    for flags, tasks in groups.items():
        out.update(parse(run_dump([Path(t["path"]) for t in tasks], *flags)))
    return groups, out


def _ours(table: str, task: dict) -> list[dict]:
    rows = list(iter_rows(TABLES[table], task))
    # a bad CRC is not an error of ours: the tool prints isvalid, compared per batch;
    # a zero tail is a note about preallocated index space after the last entry
    bad = [r for r in rows if r.get("_problem_kind") not in (None, "bad-crc", "zero-tail")]
    assert not bad, f"{task['path']}: {bad[:2]}"
    return [r for r in rows if not r.get("_problem_kind")]


def _tasks_of(groups, *flags) -> list[dict]:
    return [t for f, ts in groups.items() if f == flags for t in ts]


def _check_batches(task: dict, theirs: list[dict], deep: bool = True) -> list[dict]:
    """Our batch rows against the tool's batch lines (``deep``: and the records it printed under them)."""
    ours = _ours("batches", task)
    assert len(ours) == len(theirs), f"{task['path']}: {len(ours)} batches vs the tool's {len(theirs)}"
    for o, t in zip(ours, theirs):
        where = f"{task['path']} @ {o['position']}"
        if "baseOffset" in t:
            got = {
                "baseOffset": o["base_offset"], "lastOffset": o["last_offset"], "count": o["record_count"],
                "baseSequence": o["base_sequence"], "lastSequence": o["last_sequence"],
                "producerId": o["producer_id"], "producerEpoch": o["producer_epoch"],
                "partitionLeaderEpoch": o["partition_leader_epoch"], "isTransactional": o["is_transactional"],
                "isControl": o["is_control"], "deleteHorizonMs": o["delete_horizon_ms"],
            }
        else:  # legacy entry: the tool prints its (last) offset only
            got = {"offset": o["last_offset"]}
        got.update({"position": o["position"], o["timestamp_type"]: o["max_timestamp"], "size": o["size"],
                    "magic": o["magic"], "compresscodec": o["compression"], "crc": o["crc"], "isvalid": o["crc_valid"]})
        if o["timestamp_type"] == "NoTimestampType":
            got["NoTimestampType"] = t.get("NoTimestampType")  # magic 0 has no timestamp; the tool prints -1
        want = {k: t.get(k) for k in got}
        assert got == want, f"{where}: ours {got} vs tool {want}"
        COUNTS["batches"] += 1
        if o["magic"] < 2 and deep:
            # the tool prints a legacy entry's last offset only; its first offset (baseOffset(): the
            # first inner message's of a compressed wrapper), count and first timestamp are its records'
            recs = t["records"]
            assert recs and (o["base_offset"], o["record_count"], o["base_timestamp"]) == (
                recs[0]["offset"], len(recs), recs[0]["ts"]), f"{where}: ours {o} vs tool {recs[:3]}"
            COUNTS["legacy entries"] += 1
            if o["compression"] != "none":
                COUNTS["legacy compressed wrappers"] += 1
                LEGACY_WRAPPERS.add((o["magic"], o["compression"]))
        if o["is_control"] and o["control_type"] in ("COMMIT", "ABORT"):
            rec = t["records"][0]
            assert (o["control_type"], o["coordinator_epoch"]) == (rec["endTxnMarker"], rec["coordinatorEpoch"]), where
            COUNTS["markers"] += 1
    return ours


def test_batch_headers_and_records_match_dump_tool(dumped):
    groups, theirs = dumped
    tasks = _tasks_of(groups, "--deep-iteration")
    assert len(tasks) > 80
    for task in tasks:
        d = theirs[task["path"]]
        assert not d.other, f"unparsed dump lines for {task['path']}: {d.other[:3]}"
        _check_batches(task, d.batches)
        _check_records(task, d.batches)
        COUNTS["segment files"] += 1


def _check_records(task: dict, batches: list[dict]) -> None:
    """Every data record (what ``dump --records`` writes): offset, timestamp, key/value sizes,
    sequence, header keys; a legacy entry's records (no sequence, no headers) included."""
    expected = [r for b in batches if not b.get("isControl") for r in b["records"]]
    with open(task["path"], "rb") as f:
        got = [rec for item in segments.iter_data_records(f, task["size"]) if isinstance(item, tuple)
               for rec in [item[1]]]
    assert len(got) == len(expected), task["path"]
    for rec, t in zip(got, expected):
        mine = (rec.offset, rec.timestamp, -1 if rec.key is None else len(rec.key),
                -1 if rec.value is None else len(rec.value), rec.sequence,
                ",".join(k for k, _ in rec.headers))
        legacy = t["sequence"] is None  # the tool prints neither for magic 0/1
        want = (t["offset"], t["ts"], t["keySize"], t["valueSize"], -1 if legacy else t["sequence"], t["headerKeys"] or "")
        assert mine == want, f"{task['path']} offset {rec.offset}: {mine} vs {want}"
        COUNTS["legacy records" if legacy else "records"] += 1


LEGACY_CAPTURE = SAMPLE_LOGS / "legacy-message-formats"


def test_legacy_capture_headers_and_deep_iteration_match_dump_tool():
    """The ZooKeeper-mode capture in message formats 0 and 1 on its own (fast): batch lines of a
    shallow dump, then batch lines and records of a --deep-iteration dump, per entry."""
    tasks = [t for t in _tasks([LEGACY_CAPTURE]) if t["kind"] == "segment"]
    assert len(tasks) >= 9
    paths = [Path(t["path"]) for t in tasks]
    shallow, deep = parse(run_dump(paths)), parse(run_dump(paths, "--deep-iteration"))
    counted = COUNTS.copy()  # the corpus-wide tests count these files: the figures stay theirs
    wrappers = Counter()
    try:
        for task in tasks:
            assert not shallow[task["path"]].other and not deep[task["path"]].other
            _check_batches(task, shallow[task["path"]].batches, deep=False)
            for o in _check_batches(task, deep[task["path"]].batches):
                assert o["magic"] in (0, 1)
                wrappers[(o["magic"], o["compression"])] += 1
            _check_records(task, deep[task["path"]].batches)
        print("\nlegacy capture:", {k: v - counted.get(k, 0) for k, v in COUNTS.items() if v != counted.get(k)})
    finally:
        COUNTS.clear()
        COUNTS.update(counted)
    assert {k for k in wrappers if k[1] != "none"} == {(m, c) for m in (0, 1) for c in ("gzip", "snappy", "lz4")}


def test_transaction_log_matches_dump_tool(dumped):
    groups, theirs = dumped
    tasks = _tasks_of(groups, "--transaction-log-decoder")
    assert tasks
    for task in tasks:
        d = theirs[task["path"]]
        _check_batches(task, d.batches)
        recs = [r for b in d.batches for r in b["records"]]
        rows = _ours("transaction_log", task)
        assert len(rows) == len(recs)
        for row, t in zip(rows, recs):
            assert row["offset"] == t["offset"]
            assert t["key"]["data"]["transactionalId"] == row["transactional_id"]
            if t["payload"] == "<DELETE>":
                assert row["is_tombstone"]
                continue
            p = t["payload"]["data"]
            assert int(t["payload"]["version"]) == row["value_version"]
            tps = [{"topic": x["topic"], "partition": i} for x in (p["transactionPartitions"] or []) for i in x["partitionIds"]]
            got = (row["producer_id"], row["producer_epoch"], row["transaction_timeout_ms"], row["state_id"],
                   row["topic_partitions"] or [], row["last_update_timestamp_ms"], row["start_timestamp_ms"])
            want = (p["producerId"], p["producerEpoch"], p["transactionTimeoutMs"], p["transactionStatus"], tps,
                    p["transactionLastUpdateTimestampMs"], p["transactionStartTimestampMs"])
            assert got == want, f"{task['path']} offset {row['offset']}"
            COUNTS["transaction-log records"] += 1


def test_consumer_offsets_match_dump_tool(dumped):
    groups, theirs = dumped
    tasks = _tasks_of(groups, "--offsets-decoder")
    assert len(tasks) > 10
    for task in tasks:
        d = theirs[task["path"]]
        _check_batches(task, d.batches)
        recs = {r["offset"]: r for b in d.batches for r in b["records"]}
        for row in _ours("offset_commits", task):
            t = recs[row["offset"]]
            k = t["key"]["data"]
            assert (k["group"], k["topic"], k["partition"]) == (row["group_id"], row["topic"], row["partition"])
            if row["is_tombstone"]:
                assert t.get("payload") in (None, "<DELETE>")
            else:
                p = t["payload"]["data"]
                assert (p["offset"], p.get("leaderEpoch", -1), p["metadata"], p["commitTimestamp"]) == (
                    row["committed_offset"], row["committed_leader_epoch"] if row["committed_leader_epoch"] is not None else -1,
                    row["committed_metadata"], row["commit_timestamp_ms"])
            COUNTS["offset commits"] += 1
        for row in _ours("group_metadata", task):
            t = recs[row["offset"]]
            assert t["key"]["data"]["group"] == row["group_id"]
            if not row["is_tombstone"]:
                p = t["payload"]["data"]
                assert (p["protocolType"], p["generation"], p["protocol"], p["leader"], len(p["members"])) == (
                    row["protocol_type"], row["generation"], row["protocol"], row["leader"], row["member_count"])
                assert [m["memberId"] for m in p["members"]] == [m["member_id"] for m in row["members"]]
            COUNTS["group metadata"] += 1


def test_cluster_metadata_matches_dump_tool(dumped):
    groups, theirs = dumped
    tasks = _tasks_of(groups, "--cluster-metadata-decoder")
    assert len(tasks) > 150
    for task in tasks:
        d = theirs[task["path"]]
        _check_batches(task, d.batches)
        recs = {r["offset"]: r for b in d.batches if not b.get("isControl") for r in b["records"]}
        rows = _ours("metadata_records", task)
        assert len(rows) == len(recs), task["path"]
        for row in rows:
            p = recs[row["offset"]]["payload"]
            assert (p["type"], p["version"]) == (row["record_type"], row["record_version"]), f"{task['path']} {row['offset']}"
            if row["data_json"] is None:
                # record types the auditor names and counts but does not decode (quotas, ACLs, SCRAM, tokens)
                assert row["api_key"] not in SCHEMAS, f"{task['path']} offset {row['offset']}: known schema left undecoded"
                COUNTS["metadata records (type only)"] += 1
                continue
            assert json.loads(row["data_json"]) == p["data"], f"{task['path']} offset {row['offset']}"
            COUNTS["metadata records"] += 1
            if row["api_key"] == 15:
                COUNTS["producer-id records"] += 1


def test_producer_snapshots_indexes_and_txnindex_match_dump_tool(dumped):
    groups, theirs = dumped
    for task in _tasks_of(groups):
        d = theirs[task["path"]]
        if task["kind"] == "producer-snapshot":
            rows = _ours("producer_snapshots", task)
            assert len(rows) == len(d.entries), task["path"]
            for row, t in zip(rows, d.entries):
                got = {"producerId": row["producer_id"], "producerEpoch": row["producer_epoch"],
                       "coordinatorEpoch": row["coordinator_epoch"], "currentTxnFirstOffset": row["current_txn_first_offset"],
                       "lastTimestamp": row["last_timestamp"]}
                if row["last_sequence"] >= 0 or row["last_offset"] >= 0:  # the tool prints the batch part only if one is kept
                    got.update(firstSequence=row["first_sequence"], lastSequence=row["last_sequence"],
                               lastOffset=row["last_offset"], offsetDelta=row["offset_delta"], timestamp=row["last_timestamp"])
                assert got == {k: t.get(k) for k in got}, task["path"]
                COUNTS["snapshot entries"] += 1
        elif task["kind"] == "txn-index":
            rows = _ours("aborted_txns", task)
            assert [(r["version"], r["producer_id"], r["first_offset"], r["last_offset"], r["last_stable_offset"]) for r in rows] == [
                (t["version"], t["producerId"], t["firstOffset"], t["lastOffset"], t["lastStableOffset"]) for t in d.entries]
            COUNTS["txnindex entries"] += len(rows)
        else:
            rows = _ours("index_entries", task)
            key = ("offset", "position") if task["kind"] == "offset-index" else ("timestamp", "offset")
            theirs_entries = [tuple(t[k] for k in key) for t in d.entries]
            if not rows and len(d.entries) == 1 and is_zero_range(open(task["path"], "rb"), 0, task["size"]):
                # an all-zero (preallocated) index: the tool prints its first slot as an entry
                # (offset = base, position/timestamp 0); we report none, because the broker never
                # indexes a segment's first batch (LogSegment.append checks bytesSinceLastIndexEntry
                # before adding the batch), so a real entry can never point at position 0
                COUNTS["all-zero indexes (tool prints slot 0)"] += 1
                continue
            assert [tuple(r[k] for k in key) for r in rows] == theirs_entries, task["path"]
            COUNTS["index entries"] += len(rows)
        COUNTS["side files"] += 1


def test_zz_print_parity_figures():
    """Runs last in this module: the figures for the issue note."""
    assert COUNTS["batches"] > 100_000 and COUNTS["records"] > 100_000
    # sample_logs/legacy-message-formats: every codec of that era in both legacy formats
    assert LEGACY_WRAPPERS == {(m, c) for m in (0, 1) for c in ("gzip", "snappy", "lz4")}, LEGACY_WRAPPERS
    (PROJECT / "build").mkdir(exist_ok=True)
    (PROJECT / "build" / "parity.json").write_text(json.dumps(dict(COUNTS), indent=2))
    print("\nDumpLogSegments parity:", dict(COUNTS))
