"""``txn-audit timeline`` and ``txn-audit coordinator``.

Ground truth comes from outside the code under test: the Java hash from its
definition and from the JVM Spark runs on; the coordinator partition from the
``__transaction_state-K`` directories real brokers wrote in ``sample_logs``; the
timeline's offsets, LSO and high watermark from the scenario's ``expected.json``
(what the clients did and what the broker reported over ListOffsets).
"""

from __future__ import annotations

import json
import random
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from conftest import SAMPLE_LOGS
from tables_builder import T0, TableSet
from auditor.cli.main import cli
from auditor.formats.txnlog import java_string_hash, kafka_abs, partition_for as coordinator_partition
from auditor.forensics.replay import COMMON_KEYS

SCENARIO = SAMPLE_LOGS / "hanging-late-write"
EXPECTED = json.loads((SCENARIO / "expected.json").read_text())
HANG = EXPECTED["expect"]["anomalies"][0]
INT_MIN = -(2**31)


# -- Java String.hashCode and Kafka's partitionFor ------------------------------------------

def _reference_hash(s: str) -> int:
    """s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, mod 2^32, as a signed int."""
    raw = s.encode("utf-16-be", "surrogatepass")
    units = [int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2)]
    n = len(units)
    total = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


def _with_hash(prefix: str, target: int) -> str:
    """``prefix`` plus five characters chosen so the whole string hashes to ``target``:
    hash(p + c0..c4) = hash(p)*31^5 + c0*31^4 + ... + c4 (mod 2^32), so the sum still
    needed is written in base 31; c0 takes the rest, below 2^32 / 31^4 < 4651 (no surrogate)."""
    need = (target - _reference_hash(prefix) * 31**5) % 2**32
    digits = []
    for k in range(4, -1, -1):
        digits.append(need // 31**k)
        need %= 31**k
    return prefix + "".join(map(chr, digits))


def _ids() -> list[str]:
    rnd = random.Random(5)
    alphabet = "abcXYZ09-_.é中ß\u00ff\u07ff\u0800\uffff" + "\U0001F600\U00010000\U0010FFFF"
    ids = ["", "a", "transfers-txn", "payments-txn", "héllo-中", "emoji-\U0001F600-txn", "\U0001F600",
           "polygenelubricants", _with_hash("txn-", INT_MIN), _with_hash("négatif-", -12345)]
    ids += ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 40))) for _ in range(200)]
    return ids


def test_java_hash_against_its_definition():
    for s in _ids():
        assert java_string_hash(s) == _reference_hash(s), s
    # a character outside the BMP counts as its two surrogates, not as one code point
    assert java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00
    assert java_string_hash("\U0001F600") != 0x1F600
    assert java_string_hash("a") == 97 and java_string_hash("") == 0
    assert java_string_hash(_with_hash("négatif-", -12345)) == -12345
    negative = [s for s in _ids() if java_string_hash(s) < 0]
    assert len(negative) > 50  # the sign bit is exercised, not just small ASCII sums


def test_integer_min_value_maps_to_partition_zero():
    for s in ("polygenelubricants", _with_hash("txn-", INT_MIN), _with_hash("\U0001F600-", INT_MIN)):
        assert _reference_hash(s) == INT_MIN
        assert java_string_hash(s) == INT_MIN
        # Utils.abs gives 0; Math.abs would stay negative, Python's abs gives 2^31 (% 50 = 48)
        assert kafka_abs(INT_MIN) == 0
        assert coordinator_partition(s, 50) == 0 and coordinator_partition(s, 7) == 0
        assert abs(INT_MIN) % 50 == 48
    assert coordinator_partition(_with_hash("x", -12345), 50) == 12345 % 50


@pytest.mark.spark
def test_java_hash_matches_the_jvm(spark):
    """The JVM Spark runs on computes String.hashCode itself (py4j passes Python
    str as java.lang.String, astral characters as surrogate pairs)."""
    objects = spark._jvm.java.util.Objects
    for s in [x for x in _ids() if x][:120]:
        assert java_string_hash(s) == objects.hashCode(s), s


# -- coordinator against real brokers -------------------------------------------------------

def _broker_placements() -> list[tuple[str, int, int, str]]:
    """(scenario, partitions, K, transactional id) for every id real brokers stored in
    ``__transaction_state-K``, decoded without Spark by the ingest decoders."""
    from auditor.ingest.plan import make_plan
    from auditor.ingest.tables import TABLES, iter_rows

    spec = TABLES["transaction_log"]
    found = set()
    for exp_path in sorted(SAMPLE_LOGS.glob("*/expected.json")):
        props = json.loads(exp_path.read_text()).get("broker", {}).get("server_properties")
        if not props:
            continue  # not a broker capture (the synthetic sample)
        n = int(props["transaction.state.log.num.partitions"])
        dirs = sorted(str(p) for p in exp_path.parent.glob("broker-*/__transaction_state-*"))
        for task in make_plan(dirs).tasks:
            if not spec.accepts(task):
                continue
            for row in iter_rows(spec, task):
                assert not row.get("_problem_kind"), row
                if row["transactional_id"] is not None:
                    found.add((exp_path.parent.name, n, row["partition"], row["transactional_id"]))
    return sorted(found)


def test_coordinator_picks_the_partition_real_brokers_used(tmp_path):
    placements = _broker_placements()
    assert len(placements) >= 12 and len({k for _, _, k, _ in placements}) >= 3
    empty = TableSet(tmp_path / "t").write()
    runner = CliRunner()
    for scenario, n, k, tid in placements:
        res = runner.invoke(cli, ["coordinator", str(empty), tid, "--partitions", str(n), "--format", "jsonl"])
        assert res.exit_code == 0, res.output
        head = json.loads(res.stdout.splitlines()[0])
        assert (head["partition"], head["partitions"], head["partitions_source"]) == (k, n, "--partitions"), (scenario, tid)
        assert head["records"] == 0


# -- the hanging-late-write capture, ingested once ---------------------------------------------

@pytest.fixture(scope="module")
def hlw(spark, tmp_path_factory):
    from auditor.ingest.spark_job import ingest

    out = tmp_path_factory.mktemp("hlw") / "tables"
    ingest(spark, [str(SCENARIO)], str(out), tables=["batches", "transaction_log", "checkpoints", "metadata_records"])
    return out


def _jsonl(res) -> list[dict]:
    assert res.exit_code == 0, res.output
    return [json.loads(line) for line in res.stdout.splitlines() if line.strip()]


@pytest.mark.spark
def test_coordinator_history_from_the_dump(hlw):
    placements = {tid: (n, k) for scenario, n, k, tid in _broker_placements() if scenario == SCENARIO.name}
    n, k = placements["transfers-txn"]
    res = CliRunner().invoke(cli, ["coordinator", str(hlw), "transfers-txn", "--format", "jsonl"])
    objs = _jsonl(res)
    head, records = objs[0], objs[1:]
    # N from the metadata log (TopicRecord/PartitionRecords), equal to the broker's setting
    assert (head["partitions"], head["partitions_source"], head["partition"]) == (n, "metadata", k)
    assert head["stored_in"] == [k]
    assert [r["offset"] for r in records] == sorted(r["offset"] for r in records)
    assert {r["coordinator_partition"] for r in records} == {k}
    states = [r["state"] for r in records]
    outcomes = [t["outcome"] for t in EXPECTED["transactions"]]
    assert states.count("PrepareCommit") == outcomes.count("COMMIT")
    assert states.count("PrepareAbort") == outcomes.count("ABORT")
    aborted = next(t for t in EXPECTED["transactions"] if t["outcome"] == "ABORT")
    ongoing_before_abort = records[states.index("PrepareAbort") - 1]
    assert ongoing_before_abort["state"] == "Ongoing"
    assert ongoing_before_abort["topic_partitions"] == sorted(aborted["partitions"])
    table = CliRunner().invoke(cli, ["coordinator", str(hlw), "transfers-txn"])
    assert table.exit_code == 0 and f"__transaction_state-{k}" in table.stdout and "metadata" in table.stdout


@pytest.mark.spark
def test_coordinator_and_tables_read_the_warehouse_delta_tables(spark, hlw, tmp_path):
    """The batch job keeps the tables as Delta: ``coordinator`` and ``tables`` read their
    current version. An older version's Parquet files stay in the same directory (until
    VACUUM), so reading it as plain Parquet would count every row twice here."""
    import pyarrow.dataset as ds

    from auditor.tables.source import arrow_dataset

    wh = tmp_path / "tables"
    for d in sorted(p for p in hlw.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        df = spark.read.parquet(str(d))
        df.write.format("delta").save(str(wh / d.name))
        df.write.format("delta").mode("overwrite").save(str(wh / d.name))  # version 1: the same rows again
    plain = ds.dataset(str(wh / "transaction_log"), format="parquet").count_rows()
    assert plain == 2 * arrow_dataset(wh, "transaction_log").count_rows() > 0
    args = ["coordinator", "transfers-txn", "--format", "jsonl"]
    from_delta = _jsonl(CliRunner().invoke(cli, [args[0], str(wh), *args[1:]]))
    from_parquet = _jsonl(CliRunner().invoke(cli, [args[0], str(hlw), *args[1:]]))
    assert from_delta == from_parquet and len(from_delta) > 3
    tables = CliRunner().invoke(cli, ["tables", str(wh)])
    assert tables.exit_code == 0, tables.output
    rows = arrow_dataset(hlw, "transaction_log").count_rows()
    assert re.search(rf"transaction_log\s*│\s*{rows}\b", tables.stdout), tables.stdout


@pytest.fixture(scope="module")
def hlw_events(hlw):
    res = CliRunner().invoke(cli, ["timeline", str(hlw), "--topic", HANG["topic"], "--partition",
                                   str(HANG["partition"]), "--format", "jsonl"])
    assert "broker 1" in res.stderr
    return _jsonl(res)


@pytest.mark.spark
def test_timeline_jsonl_shape(hlw_events):
    kinds = {"data", "data-run", "marker", "control", "coordinator", "lso", "end"}
    for ev in hlw_events:
        assert set(COMMON_KEYS) <= set(ev) and ev["event"] in kinds
        if ev["time_ms"] is not None:
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", ev["time"])
    assert hlw_events[-1]["event"] == "end" and sum(e["event"] == "end" for e in hlw_events) == 1


@pytest.mark.spark
def test_timeline_markers_late_write_and_stuck_lso(hlw_events):
    tp = f"{HANG['topic']}-{HANG['partition']}"
    markers = [(e["offset"], e["control_type"]) for e in hlw_events if e["event"] == "marker"]
    expected = sorted((t["partitions"][tp]["marker_offset"], t["outcome"])
                      for t in EXPECTED["transactions"] if tp in t["partitions"])
    assert markers == expected
    assert (HANG["after_marker_offset"], "ABORT") in markers

    i_late = next(i for i, e in enumerate(hlw_events) if e["event"] == "data" and e["offset"] == HANG["first_offset"])
    late = hlw_events[i_late]
    assert (late["last_offset"], late["producer_id"], late["producer_epoch"], late["first_sequence"]) == (
        HANG["last_offset"], HANG["producer_id"], HANG["producer_epoch"], HANG["base_sequence"])
    assert late["opens_transaction"] and late["transactional_id"] == HANG["transactional_id"]
    i_abort = next(i for i, e in enumerate(hlw_events) if e["event"] == "marker" and e["offset"] == HANG["after_marker_offset"])
    assert i_abort < i_late
    # from the late write to the end the LSO stays at its first offset
    stuck = HANG["last_stable_offset"]
    assert all(e["lso"] == stuck for e in hlw_events[i_late:]), [(e["event"], e["lso"]) for e in hlw_events[i_late:]]
    lso_events = [e for e in hlw_events if e["event"] == "lso"]
    assert lso_events[-1]["offset"] == stuck and lso_events[-1]["pinned"] and lso_events[-1]["producer_id"] == HANG["producer_id"]
    end = hlw_events[-1]
    ends = EXPECTED["expect"]["end_offsets_before_shutdown"][tp]
    assert (end["lso"], end["high_watermark"], end["log_end"]) == (ends["last_stable_offset"], ends["high_watermark"],
                                                                    ends["high_watermark"])
    assert [(o["producer_id"], o["first_offset"]) for o in end["open_transactions"]] == [(HANG["producer_id"], HANG["first_offset"])]


@pytest.mark.spark
def test_timeline_interleaves_the_coordinator_in_time(hlw_events):
    coord = [e for e in hlw_events if e["event"] == "coordinator"]
    assert {e["transactional_id"] for e in coord} == {HANG["transactional_id"]}
    outcomes = [t["outcome"] for t in EXPECTED["transactions"]]
    states = [e["state"] for e in coord]
    assert states.count("PrepareCommit") == outcomes.count("COMMIT") and states.count("PrepareAbort") == outcomes.count("ABORT")
    assert all(e["detail"].startswith(f"{e['previous_state']} -> ") for e in coord[1:])
    times = [e["time_ms"] for e in hlw_events[:-1]]
    assert times == sorted(times)
    idx = {(e["event"], e.get("state"), e.get("offset")): i for i, e in enumerate(hlw_events)}
    abort = idx[("marker", None, HANG["after_marker_offset"])]
    prepare = max(i for i, e in enumerate(hlw_events[:abort]) if e.get("state") == "PrepareAbort")
    complete = next(i for i, e in enumerate(hlw_events) if e.get("state") == "CompleteAbort")
    late = idx[("data", None, HANG["first_offset"])]
    # the story of KAFKA-12671: prepare, marker, complete... and only then the late write
    assert prepare < abort < complete < late
    tp = f"{HANG['topic']}-{HANG['partition']}"
    assert hlw_events[prepare - 1]["partitions"] == [tp]
    # the id's transactions that add this partition are flagged; none does after the late write
    prepared_here = [e for e in coord if e["state"].startswith("Prepare") and e["names_partition"]]
    assert len(prepared_here) == sum(tp in t["partitions"] for t in EXPECTED["transactions"])
    after = [e for e in hlw_events[late:] if e["event"] == "coordinator"]
    assert after and not any(e["names_partition"] for e in after)


@pytest.mark.spark
def test_timeline_bounds_by_time_and_offset(hlw, hlw_events):
    marker = next(e for e in hlw_events if e["event"] == "marker" and e["offset"] == HANG["after_marker_offset"])
    res = CliRunner().invoke(cli, ["timeline", str(hlw), "--topic", HANG["topic"], "--partition", str(HANG["partition"]),
                                   "--from", marker["time"], "--to", str(HANG["last_offset"]), "--format", "jsonl"])
    evs = _jsonl(res)
    log_rows = [e for e in evs if e["event"] in ("data", "data-run", "marker")]
    assert [(e["event"], e["offset"]) for e in log_rows] == [("marker", HANG["after_marker_offset"]), ("data", HANG["first_offset"])]
    # the transaction the marker closes began before the view: known from the prefix without showing it
    aborted = next(t for t in EXPECTED["transactions"] if t["outcome"] == "ABORT")
    assert log_rows[0]["closes_offset"] == aborted["partitions"][f"{HANG['topic']}-{HANG['partition']}"]["first_offset"]
    # coordinator records only from the marker's time on, and none after the last batch shown
    coord = [e for e in evs if e["event"] == "coordinator"]
    assert coord and all(marker["time_ms"] <= e["time_ms"] <= log_rows[-1]["time_ms"] for e in coord)
    assert "CompleteAbort" in [e["state"] for e in coord] and "PrepareAbort" not in [e["state"] for e in coord]
    assert evs[-1]["lso"] == HANG["last_stable_offset"] and evs[-1]["log_end"] == HANG["last_offset"] + 1


# -- a small hand-built dump: two replicas, three producers, hostile names ------------------------

TOPIC = "tiny[/i]"
EVIL = "evil[/bold]id"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    t = TableSet(tmp_path_factory.mktemp("tiny") / "tables")
    seq = {7: 0}

    def idem(off):
        t.batch(TOPIC, 0, off, producer_id=7, producer_epoch=0, base_sequence=seq[7], ts=T0 + off * 10)
        seq[7] += 1

    def txn(off, pid, epoch, s):
        t.batch(TOPIC, 0, off, producer_id=pid, producer_epoch=epoch, base_sequence=s, transactional=True, ts=T0 + off * 10)

    for off in range(4):
        idem(off)
    for i, off in enumerate((4, 5, 6)):
        txn(off, 9, 2, i)
    t.marker(TOPIC, 0, 7, 9, 2, commit=True, coordinator_epoch=3, ts=T0 + 70)
    idem(8)
    idem(9)
    txn(10, 9, 2, 3)
    txn(11, 9, 2, 4)
    t.marker(TOPIC, 0, 12, 9, 2, commit=False, coordinator_epoch=3, ts=T0 + 120)
    txn(13, 11, 0, 0)  # never closed: holds the LSO
    txn(14, 9, 2, 5)
    txn(15, 9, 2, 6)
    t.marker(TOPIC, 0, 16, 9, 2, commit=True, coordinator_epoch=3, ts=T0 + 160)
    idem(17)
    t.checkpoint("replication-offset", TOPIC, 0, 18)
    # coordinator records just after the markers they lead to (times between batches)
    t.txn(EVIL, 0, "Ongoing", 9, 2, partitions=[(TOPIC, 0)], updated_ms=T0 + 41)
    t.txn(EVIL, 1, "PrepareCommit", 9, 2, partitions=[(TOPIC, 0)], updated_ms=T0 + 69)
    t.txn(EVIL, 2, "CompleteCommit", 9, 2, partitions=[], updated_ms=T0 + 71)
    t.txn("other", 0, "Ongoing", 11, 0, partitions=[(TOPIC, 0)], updated_ms=T0 + 131, txn_partition=1)
    # a second, shorter replica on broker 2
    for off in range(4):
        t.batch(TOPIC, 0, off, producer_id=7, producer_epoch=0, base_sequence=off, ts=T0 + off * 10, broker_id=2)
    return t.write()


DATA_BATCHES = 15  # offsets 0-17 minus the three markers


def _timeline(tables, *args):
    return CliRunner().invoke(cli, ["timeline", str(tables), "--topic", TOPIC, "--partition", "0", *args])


@pytest.mark.spark
def test_batches_all_versus_summary(tiny):
    every = _jsonl(_timeline(tiny, "--batches", "all", "--format", "jsonl"))
    summary = _jsonl(_timeline(tiny, "--format", "jsonl"))
    for evs in (every, summary):
        data = [e for e in evs if e["event"] in ("data", "data-run")]
        assert sum(e["batches"] for e in data) == DATA_BATCHES
        assert sorted(e["offset"] for e in evs if e["event"] == "marker") == [7, 12, 16]
        assert sorted(e["offset"] for e in evs if e.get("opens_transaction")) == [4, 10, 13, 14]
        assert [e["state"] for e in evs if e["event"] == "coordinator"] == ["Ongoing", "PrepareCommit", "CompleteCommit", "Ongoing"]
        end = evs[-1]
        assert (end["lso"], end["high_watermark"], end["log_end"]) == (13, 18, 18)
    assert [e["event"] for e in every].count("data") == DATA_BATCHES and "data-run" not in [e["event"] for e in every]
    runs = [(e["offset"], e["last_offset"], e["batches"], e["records"]) for e in summary if e["event"] == "data-run"]
    assert (1, 3, 3, 3) in runs  # producer 7's batches after its first, until the next event worth a line
    assert len(summary) < len(every)


@pytest.mark.spark
def test_producer_filter_with_offset_and_time_bounds(tiny):
    from auditor.forensics.replay import iso_ms

    evs = _jsonl(_timeline(tiny, "--producer-id", "9", "--from", "5", "--to", iso_ms(T0 + 150), "--format", "jsonl",
                           "--batches", "all"))
    shown = [e for e in evs if e["event"] in ("data", "data-run", "marker")]
    assert {e["producer_id"] for e in shown} == {9}
    assert [e["offset"] for e in shown] == [5, 6, 7, 10, 11, 12, 14, 15]
    assert shown[2]["closes_offset"] == 4  # opened before --from
    # producer 11's open transaction is not shown, but it holds the LSO all the same
    holds = [e for e in evs if e["event"] == "lso" and e["pinned"]]
    assert (13, 11) in [(e["offset"], e["producer_id"]) for e in holds]
    assert {e["transactional_id"] for e in evs if e["event"] == "coordinator"} == {EVIL}
    assert evs[-1]["lso"] == 13 and evs[-1]["log_end"] == 16 and evs[-1]["high_watermark"] is None


@pytest.mark.spark
def test_hostile_names_are_printed_not_interpreted(tiny):
    res = _timeline(tiny)
    assert res.exit_code == 0, res.output
    assert EVIL in res.stdout and f"{TOPIC}-0" in res.stdout and f"{TOPIC}-0" in res.stderr
    assert "1 other replica" in res.stderr and "broker 2" in res.stderr
    coord = CliRunner().invoke(cli, ["coordinator", str(tiny), EVIL])
    assert coord.exit_code == 0 and EVIL in coord.stdout


@pytest.mark.spark
def test_broker_choice_and_unknown_requests(tiny):
    evs = _jsonl(_timeline(tiny, "--broker", "2", "--format", "jsonl"))
    assert evs[-1]["log_end"] == 4 and {e["offset"] for e in evs if e["event"] == "marker"} == set()
    unknown_topic = CliRunner().invoke(cli, ["timeline", str(tiny), "--topic", "nope", "--partition", "0"])
    assert unknown_topic.exit_code == 2 and "'nope' is not in this dump" in unknown_topic.stderr
    unknown_part = _timeline_part(tiny, "3")
    assert unknown_part.exit_code == 2 and "no partition 3" in unknown_part.stderr and "present: 0" in unknown_part.stderr
    no_broker = _timeline(tiny, "--broker", "5")
    assert no_broker.exit_code == 2 and "broker 5 has no copy" in no_broker.stderr
    bad_bound = _timeline(tiny, "--from", "yesterday")
    assert bad_bound.exit_code == 2 and "ISO-8601" in bad_bound.output


@pytest.mark.spark
def test_timeline_takes_log_start_and_high_watermark_from_the_model(spark, tmp_path):
    """The replay's LSO is the audit's: an open transaction below the log start
    (log-start-offset-checkpoint above it) holds the LSO at the log start, never below
    it, and the high watermark is the model's replication checkpoint entry."""
    from auditor.engine.context import AuditContext

    t = TableSet(tmp_path / "t")
    t.batch(TOPIC, 0, 0, producer_id=5, producer_epoch=0, base_sequence=0, transactional=True, ts=T0)  # never closed
    for off in range(1, 10):
        t.batch(TOPIC, 0, off, producer_id=7, producer_epoch=0, base_sequence=off - 1, ts=T0 + off * 10)
    t.checkpoint("log-start-offset", TOPIC, 0, 4)
    t.checkpoint("replication-offset", TOPIC, 0, 8)
    root = t.write()
    ctx = AuditContext(spark, str(root))
    try:
        (model,) = ctx.last_stable_offsets.collect()
    finally:
        ctx.close()
    assert (model["log_start_offset"], model["high_watermark"], model["last_stable_offset"]) == (4, 8, 4)
    end = _jsonl(_timeline(root, "--format", "jsonl"))[-1]
    assert (end["lso"], end["high_watermark"], end["log_end"]) == (4, 8, 10)


def _timeline_part(tables, partition):
    return CliRunner().invoke(cli, ["timeline", str(tables), "--topic", TOPIC, "--partition", partition])


def test_coordinator_partition_count_sources(tmp_path):
    from auditor.ingest.inventory import FILES_SCHEMA

    t = TableSet(tmp_path / "t")
    t.txn("gone", 0, "Empty", 4, updated_ms=T0)
    t.tombstone("gone", 1)
    root = t.write()
    runner = CliRunner()
    default = _jsonl(runner.invoke(cli, ["coordinator", str(root), "never-seen", "--format", "jsonl"]))
    assert (default[0]["partitions"], default[0]["partitions_source"], default[0]["records"]) == (50, "default", 0)
    assert default[0]["partition"] == kafka_abs(_reference_hash("never-seen")) % 50
    text = runner.invoke(cli, ["coordinator", str(root), "never-seen"])
    assert text.exit_code == 0 and "no records in this dump" in text.stdout
    # history with a tombstone, in offset order
    gone = _jsonl(runner.invoke(cli, ["coordinator", str(root), "gone", "--format", "jsonl", "--partitions", "1"]))
    assert [(r["offset"], r["is_tombstone"], r["state"]) for r in gone[1:]] == [(0, False, "Empty"), (1, True, None)]
    assert "tombstone" in runner.invoke(cli, ["coordinator", str(root), "gone", "--partitions", "1"]).stdout
    # the log dirs: __transaction_state-0..9 found -> 10 partitions
    files = [{f.name: None for f in FILES_SCHEMA} | {"path": f"/d/__transaction_state-{p}", "log_dir": "/d",
                                                     "cluster_id": "test-cluster", "topic": "__transaction_state",
                                                     "partition": p} for p in range(10)]
    pq.write_table(pa.Table.from_pylist(files, schema=FILES_SCHEMA), root / "files" / "part-00000.parquet")
    dirs = _jsonl(runner.invoke(cli, ["coordinator", str(root), "never-seen", "--format", "jsonl"]))
    assert (dirs[0]["partitions"], dirs[0]["partitions_source"]) == (10, "log dirs")
    assert dirs[0]["partition"] == kafka_abs(_reference_hash("never-seen")) % 10


@pytest.fixture(scope="module")
def compacted(spark, tmp_path_factory):
    """A compacted partition after two cleaner passes: its directory holds the cleaner's
    ``*.log.deleted`` copies of the segments it replaced next to the live ones."""
    from auditor.ingest.spark_job import ingest

    out = tmp_path_factory.mktemp("compacted") / "tables"
    ingest(spark, [str(SAMPLE_LOGS / "compacted-hanging")], str(out),
           tables=["batches", "transaction_log", "checkpoints", "metadata_records"])
    return out


@pytest.mark.spark
def test_timeline_replays_the_live_log_only(compacted):
    """Every offset once (no .deleted copy replayed), and the LSO ends pinned by the
    late write the scenario planted (expected.json), as the broker reported it."""
    assert any(p.name.endswith(".log.deleted") for p in (SAMPLE_LOGS / "compacted-hanging" / "broker-1" / "kv-0").iterdir())
    exp = json.loads((SAMPLE_LOGS / "compacted-hanging" / "expected.json").read_text())["expect"]
    (hang,) = exp["anomalies"]
    res = CliRunner().invoke(cli, ["timeline", str(compacted), "--topic", "kv", "--partition", "0",
                                   "--batches", "all", "--format", "jsonl"])
    events = _jsonl(res)
    offsets = [e["offset"] for e in events if e["event"] in ("data", "marker", "control")]
    assert offsets == sorted(set(offsets)), "an offset was replayed twice"
    end = events[-1]
    assert end["lso"] == exp["end_offsets_before_shutdown"]["kv-0"]["last_stable_offset"] == hang["first_offset"]
    assert [(o["producer_id"], o["first_offset"]) for o in end["open_transactions"]] == [(hang["producer_id"], hang["first_offset"])]
