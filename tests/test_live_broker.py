"""End to end against a real Apache Kafka 4.3.1 broker: what a real client did must be in the tables.

One broker per module (scripts/kafka/harness.py; jars from Maven Central via scripts/kafka/fetch.sh).
A confluent-kafka (librdkafka) transactional producer commits one transaction and aborts one on a
2-partition topic and leaves a third open on partition 0; the broker is stopped cleanly and its log
dir is ingested on the shared Spark session. Expected values come from the client only: the producer
id/epoch librdkafka reports in its statistics, the offsets of its delivery reports, the outcome it
asked for, and the end offsets (high watermark / last stable offset) the broker reported over
ListOffsets before it was stopped. Where Kafka puts a transactional id (``__transaction_state``
partition) is computed here from Kafka's documented rule, not taken from the auditor.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from scripts.kafka.harness import NEWEST, KafkaBroker

pytestmark = pytest.mark.spark

TOPIC = "live"
TXN_ID = "live-txn"
TXN_STATE_PARTITIONS = 5  # harness: transaction.state.log.num.partitions


def _java_hash(s: str) -> int:
    h = 0
    for ch in s:  # ASCII ids: one UTF-16 unit per character
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _txn_state_partition(txn_id: str) -> int:
    h = _java_hash(txn_id)
    return (0 if h == -(1 << 31) else abs(h)) % TXN_STATE_PARTITIONS


class _Client:
    """librdkafka transactional producer + admin, with producer id/epoch from fresh statistics."""

    def __init__(self, bootstrap: str, log) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        self.eos: dict = {}
        self.ts = 0
        self.delivered: list = []
        self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "linger.ms": 5,
                           "statistics.interval.ms": 50, "stats_cb": self._stats, "logger": log})
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "logger": log})

    def _stats(self, js: str) -> None:
        st = json.loads(js)
        self.eos, self.ts = st.get("eos") or {}, st.get("ts", 0)

    def identity(self) -> tuple[int, int]:
        # librdkafka's `ts` is CLOCK_MONOTONIC in microseconds, the clock time.monotonic() reads
        t_call = time.monotonic() * 1e6
        deadline = time.monotonic() + 10
        while not (self.ts >= t_call and int(self.eos.get("producer_id", -1)) >= 0):
            self.p.poll(0.02)
            assert time.monotonic() < deadline, f"no fresh statistics: {self.eos}"
        return int(self.eos["producer_id"]), int(self.eos["producer_epoch"])

    def txn(self, writes: list[tuple[int, bytes]]) -> dict[int, list[int]]:
        """Begin and write; returns partition -> delivered offsets."""
        self.p.begin_transaction()
        self.delivered = []
        for part, value in writes:
            self.p.produce(TOPIC, value=value, partition=part,
                           on_delivery=lambda err, m: self.delivered.append((err, m.partition(), m.offset())))
        assert self.p.flush(30) == 0
        out: dict[int, list[int]] = {}
        for err, part, off in self.delivered:
            assert err is None, err
            out.setdefault(part, []).append(off)
        return out

    def end_offsets(self) -> dict[int, tuple[int, int]]:
        """partition -> (high watermark, last stable offset) from ListOffsets."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        res = {}
        for iso in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
            r = self.admin.list_offsets({TopicPartition(TOPIC, p): OffsetSpec.latest() for p in (0, 1)},
                                        isolation_level=iso, request_timeout=10)
            for tp, fut in r.items():
                res.setdefault(tp.partition, []).append(fut.result().offset)
        return {p: (v[0], v[1]) for p, v in res.items()}

    def settled(self) -> dict[int, int]:
        """Wait until LSO == HW on both partitions (all markers written); return the HW."""
        deadline = time.monotonic() + 30
        while True:
            eo = self.end_offsets()
            if all(hw == lso for hw, lso in eo.values()):
                return {p: hw for p, (hw, _) in eo.items()}
            assert time.monotonic() < deadline, f"markers not written: {eo}"
            time.sleep(0.05)


@pytest.fixture(scope="module")
def live(spark, tmp_path_factory):
    import logging

    from confluent_kafka.admin import NewTopic

    from auditor.ingest.spark_job import ingest

    t0 = time.monotonic()
    work = tmp_path_factory.mktemp("live-broker")
    log = logging.getLogger("live-broker-clients")
    log.propagate = False
    log.addHandler(logging.FileHandler(work / "clients.log"))
    broker = KafkaBroker(NEWEST, work / "broker")
    try:
        broker.start()
        c = _Client(broker.bootstrap, log)
        for f in c.admin.create_topics([NewTopic(TOPIC, 2, 1, config={"internal.segment.bytes": "1024"})]).values():
            f.result(30)
        c.p.init_transactions(30)
        facts: dict = {"txns": []}
        # 1: committed on both partitions; 2: aborted on both; 3: left open on partition 0
        for outcome, writes in (("COMMIT", [(0, b"c0"), (0, b"c1"), (1, b"c2"), (0, b"c3"), (1, b"c4")]),
                                ("ABORT", [(0, b"a0"), (1, b"a1"), (0, b"a2")])):
            offsets = c.txn(writes)
            pid, epoch = c.identity()
            (c.p.commit_transaction if outcome == "COMMIT" else c.p.abort_transaction)(30)
            hw = c.settled()
            # markers are the last records: nothing else writes to the topic
            facts["txns"].append({"outcome": outcome, "producer_id": pid, "producer_epoch": epoch,
                                  "offsets": offsets, "markers": {p: hw[p] - 1 for p in offsets}})
        open_offsets = c.txn([(0, b"o0"), (0, b"o1")])
        facts["open"] = {"offsets": open_offsets[0], "identity": c.identity()}
        facts["end_offsets"] = c.end_offsets()
        del c
        broker.stop()
        facts["broker_s"] = time.monotonic() - t0
        out = work / "tables"
        result = ingest(spark, [str(broker.log_dir)], str(out),
                        tables=["batches", "transaction_log", "producer_snapshots", "aborted_txns"])
        facts["total_s"] = time.monotonic() - t0
        print(f"\nlive broker: start {broker.timings.get('start_s', 0):.1f}s, client+broker {facts['broker_s']:.1f}s, "
              f"ingest {facts['total_s'] - facts['broker_s']:.1f}s")
        yield facts, result, out, broker
    finally:
        broker.kill()
        shutil.rmtree(work / "broker", ignore_errors=True)


def _rows(out: Path, table: str, **eq) -> list[dict]:
    rows = ds.dataset(str(out / table)).to_table().to_pylist()
    return [r for r in rows if all(r.get(k) == v for k, v in eq.items())]


def test_ingest_of_live_broker_is_clean(live):
    facts, result, _, _ = live
    assert result.bad_files == [], result.bad_files
    ok = [f for f in result.files if f["status"] == "ok"]
    assert any(f["topic"] == TOPIC and f["path"].endswith(".log") for f in ok)


def test_markers_follow_the_data_with_the_clients_identity(live):
    facts, _, out, _ = live
    markers = sorted((r["partition"], r["base_offset"], r["control_type"], r["producer_id"], r["producer_epoch"])
                     for r in _rows(out, "batches", topic=TOPIC, is_control=True))
    want = []
    for t in facts["txns"]:
        for p, off in t["markers"].items():
            assert off > max(t["offsets"][p])  # a marker comes after the data the delivery reports gave
            # TV1 (librdkafka): markers carry the data epoch
            want.append((p, off, t["outcome"], t["producer_id"], t["producer_epoch"]))
    assert markers == sorted(want)
    # every delivered record lies in a transactional batch of the same producer id/epoch
    data = [r for r in _rows(out, "batches", topic=TOPIC, is_control=False)]
    for t in facts["txns"]:
        for p, offs in t["offsets"].items():
            for o in offs:
                hit = [r for r in data if r["partition"] == p and r["base_offset"] <= o <= r["last_offset"]]
                assert len(hit) == 1
                assert (hit[0]["producer_id"], hit[0]["producer_epoch"], hit[0]["is_transactional"]) == \
                    (t["producer_id"], t["producer_epoch"], True)


def test_open_transaction_has_data_and_no_marker(live):
    facts, _, out, _ = live
    first, last = min(facts["open"]["offsets"]), max(facts["open"]["offsets"])
    pid, epoch = facts["open"]["identity"]
    rows = _rows(out, "batches", topic=TOPIC, partition=0)
    assert not [r for r in rows if r["is_control"] and r["base_offset"] > last]
    data = [r for r in rows if not r["is_control"] and r["base_offset"] >= first]
    assert data and all((r["producer_id"], r["producer_epoch"], r["is_transactional"]) == (pid, epoch, True) for r in data)
    assert max(r["last_offset"] for r in data) == last
    hw, lso = facts["end_offsets"][0]
    assert (hw, lso) == (last + 1, first)  # the broker's own view before shutdown: LSO pinned
    # the producer snapshot written at the clean shutdown records the open transaction
    snaps = _rows(out, "producer_snapshots", topic=TOPIC, partition=0, producer_id=pid)
    latest = max(snaps, key=lambda r: r["snapshot_offset"])
    assert latest["snapshot_offset"] == last + 1
    assert latest["current_txn_first_offset"] == first
    assert all(r["current_txn_first_offset"] is None
               for r in _rows(out, "producer_snapshots", topic=TOPIC, partition=1))


def test_aborted_transaction_is_in_the_txn_index(live):
    facts, _, out, _ = live
    aborted = facts["txns"][1]
    got = sorted((r["partition"], r["producer_id"], r["first_offset"], r["last_offset"])
                 for r in _rows(out, "aborted_txns", topic=TOPIC))
    assert got == sorted((p, aborted["producer_id"], min(offs), aborted["markers"][p])
                         for p, offs in aborted["offsets"].items())


def test_transaction_log_replays_the_clients_states(live):
    facts, _, out, _ = live
    rows = sorted(_rows(out, "transaction_log", transactional_id=TXN_ID), key=lambda r: r["offset"])
    assert {(r["topic"], r["partition"]) for r in rows} == {("__transaction_state", _txn_state_partition(TXN_ID))}
    pid, epoch = facts["open"]["identity"]
    assert {(r["producer_id"], r["producer_epoch"]) for r in rows} == {(pid, epoch)}
    states = [r["state"] for r in rows]
    collapsed = [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]
    assert collapsed == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit",
                         "Ongoing", "PrepareAbort", "CompleteAbort", "Ongoing"]
    last = rows[-1]
    assert last["state"] == "Ongoing"
    assert {(tp["topic"], tp["partition"]) for tp in last["topic_partitions"]} == {(TOPIC, 0)}
    commit = [r for r in rows if r["state"] == "PrepareCommit"][0]
    assert {(tp["topic"], tp["partition"]) for tp in commit["topic_partitions"]} == \
        {(TOPIC, p) for p in facts["txns"][0]["offsets"]}
