"""Differential test: our decoders against Kafka's own DumpLogSegments on the same files.

Every segment, KRaft snapshot, producer snapshot, index and transaction index
in ``sample_logs/`` and the external corpus of real files (``tests/conftest.py`` REAL_LOGS;
without it, ``sample_logs/`` alone) is dumped by Kafka's tool
(from the jars the project resolves from Maven Central) and compared field by
field with what our table decoders produce for the same file. Agreement must
be 100%; each known difference in how the two *print* a value is handled below
with its reason. The figures (files, batches, records compared) are printed and
written to build/parity.json, per Kafka version.

Two versions of the tool: **4.3.1** on all of it (as before), and **4.4.0** on the
captures a 4.4.0 broker wrote (``sample_logs/kafka-4.4`` and any other whose
expected.json says 4.4.0) plus a representative subset of the others (``SUBSET_4_4``:
TV1/TV2 transactions, magic 0/1 with every legacy codec, the cleaner's emptied batches
and delete horizons, KRaft snapshots and producer-id blocks, a crash's preallocated
indexes, transactional offset commits). 4.4.0 on everything would add the time of a
second full run for files whose format 4.4.0 did not change; the subset adds about
a fifth of it. Remote-storage segments (``<offset>-<uuid>.log`` etc., whose names the
tool cannot parse) are compared on copies named ``<offset>.<ext>``.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from conftest import HAVE_REAL_LOGS, PROJECT, REAL_LOGS, SAMPLE_LOGS
from dumptool import parse, run_dump
from auditor.formats.batch import is_zero_range
from auditor.formats.metadata import _SCHEMAS as SCHEMAS
from auditor.formats.txnlog import TRANSACTION_STATES
from auditor.ingest import segments
from auditor.ingest.plan import make_plan
from auditor.ingest.tables import TABLES, iter_rows

from scripts.kafka.harness import KAFKA_4_4, NEWEST

INTERNAL = {"__transaction_state": "--transaction-log-decoder", "__consumer_offsets": "--offsets-decoder",
            "__cluster_metadata": "--cluster-metadata-decoder"}
#: per Kafka version: what was compared
COUNTS: dict[str, Counter] = defaultdict(Counter)
#: per Kafka version: (magic, codec) of the compressed legacy wrappers compared
LEGACY_WRAPPERS: dict[str, set[tuple[int, str]]] = defaultdict(set)
#: the sample captures 4.4.0's tool also reads, besides those a 4.4.0 broker wrote (see the module doc)
SUBSET_4_4 = ("clean", "fencing-tv2", "legacy-message-formats", "compacted-transactions", "compacted-cleaner-lag",
              "many-producers", "open-at-crash", "consumer-offsets-hanging", "hanging-late-write")
#: the smallest corpus each version must cover (so a lost directory fails instead of shrinking the test);
#: 4.3.1's covers the external corpus when it is there, else sample_logs/ alone
MINIMA = {NEWEST: {"segments": 80, "offsets": 10, "metadata": 150} if HAVE_REAL_LOGS
          else {"segments": 150, "offsets": 5, "metadata": 30},
          KAFKA_4_4: {"segments": 40, "offsets": 3, "metadata": 15}}
#: a file name the tool can parse: ``<20-digit offset>.<ext>`` or a KRaft snapshot ``<offset>-<epoch>.checkpoint``
_TOOL_NAME = re.compile(r"^\d{20}(-\d{10})?\.")
_REMOTE_NAME = re.compile(r"^(?P<offset>\d{20})-(?P<uuid>[A-Za-z0-9_-]{22})(?P<ext>\..+)$")


def _tasks(roots: list[Path]) -> list[dict]:
    plan = make_plan([str(r) for r in roots], split_bytes=1 << 62)
    # the tool skips files it does not know by their suffix: a cleaner's *.log.deleted, *.cleaned, *.swap
    return [t for t in plan.tasks if t["size"] > 0 and not t["path"].endswith((".deleted", ".cleaned", ".swap"))]


def _remote_copies(roots: list[Path], dest: Path) -> Path | None:
    """Remote-storage segments (``<offset>-<segment uuid>.log/.index/...`` under
    ``<topic>-<partition>-<topic uuid>/``) copied to ``<uuid>/<topic>-<partition>/<offset>.<ext>``:
    DumpLogSegments parses the base offset from the whole name before the dot, so it only reads
    them under the local name; both sides then read the same copy."""
    n = 0
    for root in roots:
        for p in sorted(root.rglob("*")):
            m = _REMOTE_NAME.match(p.name)
            if not m or not p.is_file():
                continue
            partition_dir = re.sub(r"-[A-Za-z0-9_-]{22}$", "", p.parent.name)
            d = dest / m["uuid"] / partition_dir
            d.mkdir(parents=True, exist_ok=True)
            shutil.copy(p, d / (m["offset"] + m["ext"]))
            n += 1
    return dest if n else None


def _version_captures(version: str) -> list[Path]:
    """The sample captures a broker of ``version`` wrote (their expected.json's ``kafka_version``)."""
    out = []
    for exp in sorted(SAMPLE_LOGS.glob("*/expected.json")):
        if json.loads(exp.read_text()).get("kafka_version") == version:
            out.append(exp.parent)
    return out


@pytest.fixture(scope="module", params=[NEWEST, KAFKA_4_4])
def corpus(request, tmp_path_factory) -> tuple[str, list[dict]]:
    version = request.param
    if version == NEWEST:
        roots = [SAMPLE_LOGS]
        if HAVE_REAL_LOGS:
            roots.append(REAL_LOGS)
            # kafka-python's legacy (v0/v1) fixtures: the dump tool only reads *.log names
            legacy = tmp_path_factory.mktemp("legacy")
            for name in ("record_batch_data_v0", "record_batch_data_v1", "record_batch_data_v2", "control_batch_data_v2"):
                d = legacy / f"{name.replace('_', '')}-0"
                d.mkdir()
                shutil.copy(REAL_LOGS / "dpkp__kafka-python/extracted/test/record/test_records.py" / f"{name}.bin",
                            d / "00000000000000000000.log")
            roots.append(legacy)
    else:
        own = _version_captures(version)
        assert SAMPLE_LOGS / "kafka-4.4" in own, own
        roots = own + [SAMPLE_LOGS / name for name in SUBSET_4_4]
    remote = _remote_copies(roots, tmp_path_factory.mktemp("remote"))
    tasks = [t for t in _tasks(roots) if _TOOL_NAME.match(Path(t["path"]).name)]
    if remote is not None:
        tasks += _tasks([remote])
    return version, tasks


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
def dumped(corpus) -> tuple[str, dict[tuple[str, ...], list[dict]], dict]:
    version, tasks = corpus
    groups = _group(tasks)
    out: dict = {}
    for flags, group in groups.items():
        out.update(parse(run_dump([Path(t["path"]) for t in group], *flags, version=version)))
    return version, groups, out


def _ours(table: str, task: dict) -> list[dict]:
    rows = list(iter_rows(TABLES[table], task))
    # a bad CRC is not an error of ours: the tool prints isvalid, compared per batch;
    # a zero tail is a note about preallocated index space after the last entry
    bad = [r for r in rows if r.get("_problem_kind") not in (None, "bad-crc", "zero-tail")]
    assert not bad, f"{task['path']}: {bad[:2]}"
    return [r for r in rows if not r.get("_problem_kind")]


def _tasks_of(groups, *flags) -> list[dict]:
    return [t for f, ts in groups.items() if f == flags for t in ts]


def _check_batches(task: dict, theirs: list[dict], counts: Counter, wrappers: set, deep: bool = True) -> list[dict]:
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
        counts["batches"] += 1
        if o["magic"] < 2 and deep:
            # the tool prints a legacy entry's last offset only; its first offset (baseOffset(): the
            # first inner message's of a compressed wrapper), count and first timestamp are its records'
            recs = t["records"]
            assert recs and (o["base_offset"], o["record_count"], o["base_timestamp"]) == (
                recs[0]["offset"], len(recs), recs[0]["ts"]), f"{where}: ours {o} vs tool {recs[:3]}"
            counts["legacy entries"] += 1
            if o["compression"] != "none":
                counts["legacy compressed wrappers"] += 1
                wrappers.add((o["magic"], o["compression"]))
        if o["is_control"] and o["control_type"] in ("COMMIT", "ABORT"):
            rec = t["records"][0]
            assert (o["control_type"], o["coordinator_epoch"]) == (rec["endTxnMarker"], rec["coordinatorEpoch"]), where
            counts["markers"] += 1
    return ours


def test_batch_headers_and_records_match_dump_tool(dumped):
    version, groups, theirs = dumped
    counts = COUNTS[version]
    tasks = _tasks_of(groups, "--deep-iteration")
    assert len(tasks) > MINIMA[version]["segments"]
    for task in tasks:
        d = theirs[task["path"]]
        assert not d.other, f"unparsed dump lines for {task['path']}: {d.other[:3]}"
        _check_batches(task, d.batches, counts, LEGACY_WRAPPERS[version])
        _check_records(task, d.batches, counts)
        counts["segment files"] += 1


def _check_records(task: dict, batches: list[dict], counts: Counter) -> None:
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
        counts["legacy records" if legacy else "records"] += 1


LEGACY_CAPTURE = SAMPLE_LOGS / "legacy-message-formats"


def test_legacy_capture_headers_and_deep_iteration_match_dump_tool():
    """The ZooKeeper-mode capture in message formats 0 and 1 on its own (fast): batch lines of a
    shallow dump, then batch lines and records of a --deep-iteration dump, per entry."""
    tasks = [t for t in _tasks([LEGACY_CAPTURE]) if t["kind"] == "segment"]
    assert len(tasks) >= 9
    paths = [Path(t["path"]) for t in tasks]
    shallow, deep = parse(run_dump(paths)), parse(run_dump(paths, "--deep-iteration"))
    counts = Counter()  # the corpus-wide tests count these files: the figures stay theirs
    wrappers = Counter()
    for task in tasks:
        assert not shallow[task["path"]].other and not deep[task["path"]].other
        _check_batches(task, shallow[task["path"]].batches, counts, set(), deep=False)
        for o in _check_batches(task, deep[task["path"]].batches, counts, set()):
            assert o["magic"] in (0, 1)
            wrappers[(o["magic"], o["compression"])] += 1
        _check_records(task, deep[task["path"]].batches, counts)
    print("\nlegacy capture:", dict(counts))
    assert {k for k in wrappers if k[1] != "none"} == {(m, c) for m in (0, 1) for c in ("gzip", "snappy", "lz4")}


def test_transaction_log_matches_dump_tool(dumped):
    version, groups, theirs = dumped
    counts = COUNTS[version]
    tasks = _tasks_of(groups, "--transaction-log-decoder")
    assert tasks
    for task in tasks:
        d = theirs[task["path"]]
        _check_batches(task, d.batches, counts, LEGACY_WRAPPERS[version])
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
            state = row["state_id"]
            if isinstance(p["transactionStatus"], str):
                # 4.4.0's TransactionLogMessageParser prints TransactionState.fromId(id).stateName()
                # ("Ongoing"), 4.3.1 the id; an id fromId does not know stays a number, as text
                state = TRANSACTION_STATES.get(state, str(state))
                counts["transaction states printed by name"] += 1
            got = (row["producer_id"], row["producer_epoch"], row["transaction_timeout_ms"], state,
                   row["topic_partitions"] or [], row["last_update_timestamp_ms"], row["start_timestamp_ms"])
            want = (p["producerId"], p["producerEpoch"], p["transactionTimeoutMs"], p["transactionStatus"], tps,
                    p["transactionLastUpdateTimestampMs"], p["transactionStartTimestampMs"])
            assert got == want, f"{task['path']} offset {row['offset']}"
            counts["transaction-log records"] += 1


def test_consumer_offsets_match_dump_tool(dumped):
    version, groups, theirs = dumped
    counts = COUNTS[version]
    tasks = _tasks_of(groups, "--offsets-decoder")
    assert len(tasks) > MINIMA[version]["offsets"]
    for task in tasks:
        d = theirs[task["path"]]
        _check_batches(task, d.batches, counts, LEGACY_WRAPPERS[version])
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
            counts["offset commits"] += 1
        for row in _ours("group_metadata", task):
            t = recs[row["offset"]]
            assert t["key"]["data"]["group"] == row["group_id"]
            if not row["is_tombstone"]:
                p = t["payload"]["data"]
                assert (p["protocolType"], p["generation"], p["protocol"], p["leader"], len(p["members"])) == (
                    row["protocol_type"], row["generation"], row["protocol"], row["leader"], row["member_count"])
                assert [m["memberId"] for m in p["members"]] == [m["member_id"] for m in row["members"]]
            counts["group metadata"] += 1


def test_cluster_metadata_matches_dump_tool(dumped):
    version, groups, theirs = dumped
    counts = COUNTS[version]
    tasks = _tasks_of(groups, "--cluster-metadata-decoder")
    assert len(tasks) > MINIMA[version]["metadata"]
    for task in tasks:
        d = theirs[task["path"]]
        _check_batches(task, d.batches, counts, LEGACY_WRAPPERS[version])
        recs = {r["offset"]: r for b in d.batches if not b.get("isControl") for r in b["records"]}
        rows = _ours("metadata_records", task)
        assert len(rows) == len(recs), task["path"]
        for row in rows:
            p = recs[row["offset"]]["payload"]
            assert (p["type"], p["version"]) == (row["record_type"], row["record_version"]), f"{task['path']} {row['offset']}"
            if row["data_json"] is None:
                # record types the auditor names and counts but does not decode (quotas, ACLs, SCRAM, tokens)
                assert row["api_key"] not in SCHEMAS, f"{task['path']} offset {row['offset']}: known schema left undecoded"
                counts["metadata records (type only)"] += 1
                continue
            assert json.loads(row["data_json"]) == p["data"], f"{task['path']} offset {row['offset']}"
            counts["metadata records"] += 1
            if row["api_key"] == 15:
                counts["producer-id records"] += 1


def test_producer_snapshots_indexes_and_txnindex_match_dump_tool(dumped):
    version, groups, theirs = dumped
    counts = COUNTS[version]
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
                counts["snapshot entries"] += 1
        elif task["kind"] == "txn-index":
            rows = _ours("aborted_txns", task)
            assert [(r["version"], r["producer_id"], r["first_offset"], r["last_offset"], r["last_stable_offset"]) for r in rows] == [
                (t["version"], t["producerId"], t["firstOffset"], t["lastOffset"], t["lastStableOffset"]) for t in d.entries]
            counts["txnindex entries"] += len(rows)
        else:
            rows = _ours("index_entries", task)
            key = ("offset", "position") if task["kind"] == "offset-index" else ("timestamp", "offset")
            theirs_entries = [tuple(t[k] for k in key) for t in d.entries]
            if not rows and len(d.entries) == 1 and is_zero_range(open(task["path"], "rb"), 0, task["size"]):
                # an all-zero (preallocated) index: the tool prints its first slot as an entry
                # (offset = base, position/timestamp 0); we report none, because the broker never
                # indexes a segment's first batch (LogSegment.append checks bytesSinceLastIndexEntry
                # before adding the batch), so a real entry can never point at position 0
                counts["all-zero indexes (tool prints slot 0)"] += 1
                continue
            assert [tuple(r[k] for k in key) for r in rows] == theirs_entries, task["path"]
            counts["index entries"] += len(rows)
            if rows and any(r.get("_problem_kind") == "zero-tail" for r in iter_rows(TABLES["index_entries"], task)):
                # entries, then preallocated zeros: the tool stops where we do (Kafka 4.4.0's metadata log
                # after a clean stop; a crashed broker's active segment)
                counts["indexes with entries then a zero tail"] += 1
        counts["side files"] += 1


def test_zz_print_parity_figures(dumped):
    """Runs last for each version (the module's tests are grouped by it): the figures for the issue note."""
    version = dumped[0]
    counts = COUNTS[version]
    if version == NEWEST:
        least = 100_000 if HAVE_REAL_LOGS else 1_000  # sample_logs/ alone: 4,118 batches, 1,590 records
        assert counts["batches"] > least and counts["records"] > least
    else:
        assert counts["batches"] > 1_000 and counts["records"] > 300
        # the metadata log's 10 MiB .index/.timeindex a 4.4.0 clean stop leaves untrimmed (sample_logs/kafka-4.4)
        assert counts["indexes with entries then a zero tail"] >= 2, counts
    # sample_logs/legacy-message-formats: every codec of that era in both legacy formats
    assert LEGACY_WRAPPERS[version] == {(m, c) for m in (0, 1) for c in ("gzip", "snappy", "lz4")}, LEGACY_WRAPPERS
    (PROJECT / "build").mkdir(exist_ok=True)
    out = PROJECT / "build" / "parity.json"
    try:
        figures = json.loads(out.read_text())
        figures = figures if isinstance(figures, dict) and all(isinstance(v, dict) for v in figures.values()) else {}
    except (OSError, ValueError):
        figures = {}
    figures[version] = dict(counts)
    out.write_text(json.dumps(figures, indent=2))
    print(f"\nDumpLogSegments {version} parity:", dict(counts))
