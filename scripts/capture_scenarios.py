#!/usr/bin/env python3
"""Capture real Kafka broker log dirs into ``sample_logs/<scenario>/`` with their ground truth.

Each scenario runs against a fresh single-node KRaft broker, or a 3-node KRaft cluster (combined
broker+controller nodes, 3 voters) for the multi-broker ones, or a ZooKeeper-mode 3.5.2 broker with
its own ZooKeeper for the legacy message formats (``scripts/kafka/harness.py``), drives
it with real clients — confluent-kafka (librdkafka: transactional and idempotent producers,
consumers, admin), Kafka's own Java producer for transaction version 2, and kafka-python's protocol
layer for the requests no well-behaved client sends — then stops the broker cleanly or SIGKILLs it,
copies its log dir to ``sample_logs/<scenario>/broker-1/`` (each node's to ``broker-<node.id>/``)
unmodified, and writes
``sample_logs/<scenario>/expected.json``.

Ground truth is client-side bookkeeping only: the producer id/epoch the client held (librdkafka's
statistics ``eos`` block, the Java client's transaction manager, or the InitProducerId response),
the partition and offset of every record from the delivery reports / produce responses, the
outcome the client asked for, and end offsets (high watermark, last stable offset) the broker
reported over ListOffsets before it was stopped. Never the auditor's output.

Mutated scenarios copy part of a real capture and change named bytes (recomputing CRC-32C); the
exact change is written into their expected.json under ``mutation``.

Usage::

    .venv/bin/python scripts/capture_scenarios.py               # all scenarios (~3.5 min)
    .venv/bin/python scripts/capture_scenarios.py --only clean  # one (mutations need their base)
    .venv/bin/python scripts/capture_scenarios.py --list
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import shutil
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from auditor.formats.txnlog import partition_for  # noqa: E402
from scripts.kafka.harness import (  # noqa: E402
    KAFKA_4_4,
    NEWEST,
    PRE_VERIFICATION,
    JavaProducer,
    KafkaBroker,
    KafkaCluster,
    RawConnection,
    cluster_id_for,
    libs_dir,
)

SAMPLE_LOGS = ROOT / "sample_logs"
WORK = ROOT / "build" / "capture"
GENERATED_BY = "scripts/capture_scenarios.py"
INTERNAL_PARTITIONS = 5  # offsets.topic.num.partitions and transaction.state.log.num.partitions (harness)

log = logging.getLogger("capture")


# --------------------------------------------------------------------------------------------------
# Kafka facts used to name where things land (documented rules, not observations)
# --------------------------------------------------------------------------------------------------
def coordinator_partition(key: str, partitions: int = INTERNAL_PARTITIONS) -> int:
    """Partition of ``__transaction_state`` / ``__consumer_offsets`` that owns a transactional id / group."""
    return partition_for(key, partitions)  # the same formula for groups (GroupCoordinator.partitionFor)


def tp(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


# --------------------------------------------------------------------------------------------------
# Bookkeeping
# --------------------------------------------------------------------------------------------------
@dataclass
class Txn:
    transactional_id: str
    client: str
    producer_id: int
    producer_epoch: int
    transaction_version: int
    offsets: dict[str, list[int]] = field(default_factory=dict)
    outcome: str = "OPEN"
    marker_epoch: int | None = None
    marker_offsets: dict[str, int] = field(default_factory=dict)
    offset_commits: list[dict] = field(default_factory=list)
    note: str | None = None

    def as_json(self) -> dict:
        parts = {}
        for k, offs in sorted(self.offsets.items()):
            parts[k] = {"first_offset": min(offs), "last_offset": max(offs), "record_offsets": sorted(offs)}
            if k in self.marker_offsets:
                parts[k]["marker_offset"] = self.marker_offsets[k]
        for k, off in self.marker_offsets.items():
            parts.setdefault(k, {"record_offsets": []})["marker_offset"] = off
        d = {
            "transactional_id": self.transactional_id,
            "client": self.client,
            "transaction_version": self.transaction_version,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "outcome": self.outcome,
            "marker_epoch": self.marker_epoch,
            "partitions": parts,
        }
        if self.offset_commits:
            d["offset_commits"] = self.offset_commits
        if self.note:
            d["note"] = self.note
        return d


class Recorder:
    """What the scenario did, as the clients saw it."""

    def __init__(self) -> None:
        self.txns: list[Txn] = []
        self.writes: list[dict] = []  # non-transactional writes
        self.raw: list[dict] = []  # raw protocol requests and the broker's answers
        self.producers: dict[str, dict] = {}
        self.end_offsets: dict[str, dict] = {}
        self.keyed: dict[str, list] = {}  # compacted topics: partition -> [offset, key, tombstone, writer]

    def keyed_record(self, t: str, p: int, offset: int, key: bytes | None, tombstone: bool, writer: str) -> None:
        if key is not None:
            self.keyed.setdefault(tp(t, p), []).append([offset, key.decode(), tombstone, writer])

    def producer(self, name: str, **info) -> None:
        self.producers.setdefault(name, {"name": name}).update(info)

    def write(self, producer: str, kind: str, pid: int, epoch: int, records: list[tuple[str, int, int]], first_sequence: dict[str, int] | None = None) -> None:
        by_tp: dict[str, list[int]] = {}
        for t, p, o in records:
            by_tp.setdefault(tp(t, p), []).append(o)
        for k, offs in sorted(by_tp.items()):
            w = {"producer": producer, "kind": kind, "producer_id": pid, "producer_epoch": epoch, "partition": k,
                 "record_offsets": sorted(offs)}
            if first_sequence and k in first_sequence:
                w["first_sequence"] = first_sequence[k]
            self.writes.append(w)

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for t in self.txns:
            for k in set(t.offsets) | set(t.marker_offsets):
                c = out.setdefault(k, {"committed": 0, "aborted": 0, "open": 0})
                c[{"COMMIT": "committed", "ABORT": "aborted"}.get(t.outcome, "open")] += 1
        return dict(sorted(out.items()))


# --------------------------------------------------------------------------------------------------
# Clients
# --------------------------------------------------------------------------------------------------
class CkProducer:
    """A confluent-kafka producer whose producer id/epoch come from librdkafka's statistics (``eos``)."""

    def __init__(self, ctx: "Ctx", name: str, conf: dict) -> None:
        from confluent_kafka import Producer

        self.ctx = ctx
        self.name = name
        self.eos: dict = {}
        self.stats_n = 0
        self.stats_ts = 0
        self.pending: list = []
        self.sent_per_tp: dict[str, int] = {}  # messages handed to librdkafka per partition in this epoch
        full = {
            "bootstrap.servers": ctx.broker.bootstrap,
            "statistics.interval.ms": 50,
            "stats_cb": self._stats,
            "logger": ctx.client_log,
            "linger.ms": 5,
            "client.id": name,
        }
        full.update(conf)
        self.conf = conf
        self.p = Producer(full)

    def _stats(self, js: str) -> None:
        st = json.loads(js)
        self.eos = st.get("eos") or {}
        self.stats_ts = st.get("ts", 0)
        self.stats_n += 1

    def identity(self) -> tuple[int, int]:
        """(producer_id, producer_epoch) from a statistics snapshot librdkafka took after this call.

        Stats carry ``ts``, librdkafka's CLOCK_MONOTONIC in microseconds (the clock Python's
        ``time.monotonic`` reads on Linux), so stale callbacks still queued are skipped.
        """
        t_call = time.monotonic() * 1e6
        deadline = time.monotonic() + 10
        while not (self.stats_ts >= t_call and int(self.eos.get("producer_id", -1)) >= 0):
            self.p.poll(0.02)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no fresh statistics with a producer id ({self.eos})")
        return int(self.eos["producer_id"]), int(self.eos["producer_epoch"])

    def send(self, topic: str, partition: int, value: bytes, key: bytes | None = None) -> None:
        def dr(err, msg):
            self.pending.append((err, msg.topic(), msg.partition(), msg.offset()))
            if msg.key() is not None and err is None:
                self.ctx.rec.keyed_record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value() is None,
                                          self.name)

        self.p.produce(topic, value=value, key=key, partition=partition, on_delivery=dr)
        k = tp(topic, partition)
        self.sent_per_tp[k] = self.sent_per_tp.get(k, 0) + 1

    def flush(self) -> list[tuple[str, int, int]]:
        left = self.p.flush(30)
        if left:
            raise RuntimeError(f"{self.name}: {left} messages undelivered")
        out = []
        for err, t, p, o in self.pending:
            if err is not None:
                raise RuntimeError(f"{self.name}: delivery failed: {err}")
            out.append((t, p, o))
        self.pending = []
        return out

    def close(self) -> None:
        try:
            self.p.flush(1)
        except Exception:  # noqa: BLE001 - broker may be gone (kill scenarios)
            pass
        del self.p


class Ctx:
    """One scenario run: a fresh broker, admin client, clients and the recorder."""

    def __init__(self, name: str, version: str, overrides: dict, features: dict | None, brokers: int = 1,
                 node_overrides: dict | None = None, zookeeper: bool = False) -> None:
        self.name = name
        self.version = version
        self.workdir = WORK / name
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(parents=True)
        self.client_log = logging.getLogger(f"clients.{name}")
        self.client_log.propagate = False
        h = logging.FileHandler(self.workdir / "clients.log")
        h.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        self.client_log.handlers = [h]
        self.client_log.setLevel(logging.INFO)
        self.overrides = overrides
        self.features = features or {}
        self.brokers = brokers
        self.node_overrides = node_overrides or {}
        if brokers > 1:
            # a cluster: node workdirs build/capture/<name>/node-<id>/, log dirs node-<id>/data
            self.broker = KafkaCluster(version, self.workdir, brokers, overrides, self.node_overrides,
                                       features=features, cluster_id=cluster_id_for(name))
        else:
            self.broker = KafkaBroker(version, self.workdir, overrides, features=features, cluster_id=cluster_id_for(name),
                                      zookeeper=zookeeper)
        self.rf = min(brokers, 3)
        self.rec = Recorder()
        self.clients: list = []
        self.admin = None
        self.ending = "stop"
        self.ending_text: str | None = None  # clusters: a description of how the nodes ended
        self.after_stop: list[Callable[[], dict]] = []  # checks run on the stopped log dirs before copying
        self.used_java = False
        self.extra_dirs: dict[str, Path] = {}  # copied next to the log dirs: sample_logs/<scenario>/<name>/

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        from confluent_kafka.admin import AdminClient

        self.broker.start()
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap, "logger": self.client_log})

    def close_clients(self) -> None:
        for c in self.clients:
            c.close()
        self.clients = []
        self.admin = None

    # -- admin ----------------------------------------------------------------------------------
    def segment_config(self, segment_bytes: int) -> dict[str, str]:
        """Small segments: 3.x accepts ``segment.bytes`` down to 14 bytes; 4.x requires >= 1 MiB
        there and offers the internal topic config ``internal.segment.bytes`` for tests."""
        if self.version.startswith("3."):
            return {"segment.bytes": str(segment_bytes)}
        return {"internal.segment.bytes": str(segment_bytes)}

    def create_topic(self, name: str, partitions: int, segment_bytes: int = 2048, **config: str) -> None:
        from confluent_kafka.admin import NewTopic

        cfg = self.segment_config(segment_bytes)
        cfg.update(config)
        for f in self.admin.create_topics([NewTopic(name, partitions, self.rf, config=cfg)]).values():
            f.result(30)
        # wait until the partitions have a leader (metadata propagated) and, in a cluster, a full ISR
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            md = self.admin.list_topics(name, timeout=5)
            t = md.topics.get(name)
            if t and t.error is None and len(t.partitions) == partitions and all(
                    p.leader >= 0 and len(p.isrs) == self.rf for p in t.partitions.values()):
                return
            time.sleep(0.1)
        raise RuntimeError(f"topic {name} not ready")

    def end_offsets(self, tps: list[tuple[str, int]]) -> dict[str, dict[str, int]]:
        """High watermark (read_uncommitted latest) and last stable offset (read_committed latest)."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        out: dict[str, dict[str, int]] = {}
        for iso, key in ((IsolationLevel.READ_UNCOMMITTED, "high_watermark"), (IsolationLevel.READ_COMMITTED, "last_stable_offset")):
            req = {TopicPartition(t, p): OffsetSpec.latest() for t, p in tps}
            res = self.admin.list_offsets(req, isolation_level=iso, request_timeout=10)
            for tpo, fut in res.items():
                out.setdefault(tp(tpo.topic, tpo.partition), {})[key] = fut.result().offset
        return out

    def settle(self, tps: list[tuple[str, int]], timeout: float = 30.0) -> dict[str, int]:
        """Wait until every partition's LSO equals its high watermark (all markers written); return HW."""
        deadline = time.monotonic() + timeout
        while True:
            eo = self.end_offsets(tps)
            if all(v["high_watermark"] == v["last_stable_offset"] for v in eo.values()):
                return {k: v["high_watermark"] for k, v in eo.items()}
            if time.monotonic() > deadline:
                raise RuntimeError(f"partitions did not settle: {eo}")
            time.sleep(0.05)

    def record_end_offsets(self, tps: list[tuple[str, int]]) -> None:
        self.rec.end_offsets.update(self.end_offsets(tps))

    # -- clusters ---------------------------------------------------------------------------------
    def log_dirs(self) -> dict[int, Path]:
        return self.broker.log_dirs() if isinstance(self.broker, KafkaCluster) else {1: self.broker.log_dir}

    def partitions(self, topic: str) -> dict[int, dict]:
        """Leader, replicas and ISR of each partition of ``topic`` as a Metadata request reports them."""
        md = self.admin.list_topics(topic, timeout=10)
        t = md.topics[topic]
        if t.error is not None:
            raise RuntimeError(f"{topic}: {t.error}")
        return {p.id: {"leader": p.leader, "replicas": list(p.replicas), "isr": sorted(p.isrs)}
                for p in sorted(t.partitions.values(), key=lambda x: x.id)}

    def wait_isr_full(self, topics: list[str], timeout: float = 60.0) -> dict[str, dict]:
        """Wait until every partition of ``topics`` has all its replicas in the ISR and a leader."""
        deadline = time.monotonic() + timeout
        while True:
            state = {}
            ok = True
            for t in topics:
                for pid, info in self.partitions(t).items():
                    state[tp(t, pid)] = info
                    ok &= info["leader"] >= 0 and sorted(info["isr"]) == sorted(info["replicas"])
            if ok:
                return state
            if time.monotonic() > deadline:
                raise RuntimeError(f"ISR not full after {timeout}s: {state}")
            time.sleep(0.2)

    def end_txn_tracked(self, txn: Txn, end: Callable[[], None], outcome: str, marker_epoch: Callable[[], int | None]) -> None:
        """End ``txn`` with ``end()`` and find its markers while other transactions stay open on the same
        partitions (so LSO == HW cannot be waited for): nothing else writes in between, so each of the
        transaction's partitions grows by exactly one record, its marker, at the old high watermark."""
        tps = [(k.rsplit("-", 1)[0], int(k.rsplit("-", 1)[1])) for k in txn.offsets]
        before = {k: v["high_watermark"] for k, v in self.end_offsets(tps).items()}
        end()
        txn.outcome = outcome
        txn.marker_epoch = marker_epoch()
        deadline = time.monotonic() + 30
        while True:
            hw = {k: v["high_watermark"] for k, v in self.end_offsets(tps).items()}
            if all(hw[k] == before[k] + 1 for k in before):
                break
            if any(hw[k] > before[k] + 1 for k in before) or time.monotonic() > deadline:
                raise RuntimeError(f"markers of {txn.transactional_id}: hw {before} -> {hw}")
            time.sleep(0.05)
        for k, h in before.items():
            txn.marker_offsets[k] = h

    # -- producers ------------------------------------------------------------------------------
    def ck(self, name: str, **conf) -> CkProducer:
        p = CkProducer(self, name, conf)
        self.clients.append(p)
        return p

    def java(self, name: str, **conf) -> JavaProducer:
        cfg = {"bootstrap.servers": self.broker.bootstrap, "client.id": name, "linger.ms": 5}
        cfg.update(conf)
        p = JavaProducer(self.version, cfg, log_file=self.workdir / f"{name}.java.log")
        self.used_java = True
        self.clients.append(p)
        return p

    # -- transactions with bookkeeping ----------------------------------------------------------
    def ck_txn(self, p: CkProducer, writes: list[tuple[str, int, bytes]], outcome: str, *,
               settle: bool = True, offsets_from=None) -> Txn:
        """One librdkafka transaction (transaction version 0/1: markers carry the data epoch)."""
        p.p.begin_transaction()
        pid, epoch = p.identity()
        txn = Txn(p.conf["transactional.id"], "confluent-kafka " + _ck_version(), pid, epoch, self.tv_ck())
        for w in writes:  # (topic, partition, value) or, keyed, (topic, partition, key, value-or-None)
            p.send(w[0], w[1], w[-1], key=w[2] if len(w) == 4 else None)
        for t, part, o in p.flush():
            txn.offsets.setdefault(tp(t, part), []).append(o)
        if offsets_from is not None:
            consumer, group_id, positions = offsets_from
            p.p.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            txn.offset_commits = [{"group_id": group_id, "topic": x.topic, "partition": x.partition,
                                   "committed_offset": x.offset,
                                   "offsets_partition": tp("__consumer_offsets", coordinator_partition(group_id))}
                                  for x in positions]
        self.rec.txns.append(txn)
        if outcome == "OPEN":
            return txn
        if outcome == "COMMIT":
            p.p.commit_transaction(30)
        else:
            p.p.abort_transaction(30)
        txn.outcome = outcome
        _, after = p.identity()
        txn.marker_epoch = after  # TV0/1: the client keeps its epoch; markers carry it
        if settle:
            self._settle_markers(txn)
        return txn

    def java_txn(self, p: JavaProducer, writes: list[tuple[str, int, str]], outcome: str, *, settle: bool = True) -> Txn:
        """One Java-client transaction; with TV2 the EndTxn response hands the client the bumped epoch,
        which is the epoch the coordinator's markers carry."""
        st = p.call("begin")
        txn = Txn(p.transactional_id, f"kafka-clients {self.version} (Java)", st["producer_id"], st["producer_epoch"],
                  2 if st["tv2"] else self.tv_ck())
        for w in writes:  # (topic, partition, value) or, keyed, (topic, partition, key, value-or-None)
            if len(w) == 4:
                p.call("sendkv", w[0], w[1], w[2], "~null" if w[3] is None else w[3])
            else:
                p.call("send", *w)
        for w, r in zip(writes, p.call("flush")["records"]):
            txn.offsets.setdefault(tp(r["topic"], r["partition"]), []).append(r["offset"])
            if len(w) == 4:
                self.rec.keyed_record(r["topic"], r["partition"], r["offset"], w[2].encode(), w[3] is None,
                                      str(p.config.get("client.id")))
        self.rec.txns.append(txn)
        if outcome == "OPEN":
            return txn
        st = p.call("commit" if outcome == "COMMIT" else "abort")
        txn.outcome = outcome
        txn.marker_epoch = st["producer_epoch"] if st["producer_id"] == txn.producer_id else None
        if settle:
            self._settle_markers(txn)
        return txn

    def ck_more(self, p: CkProducer, txn: Txn, writes: list[tuple]) -> None:
        """More writes into ``txn`` (opened by ``ck_txn(..., "OPEN")``), delivered before returning."""
        for w in writes:
            p.send(w[0], w[1], w[-1], key=w[2] if len(w) == 4 else None)
        for t, part, o in p.flush():
            txn.offsets.setdefault(tp(t, part), []).append(o)

    def java_more(self, p: JavaProducer, txn: Txn, writes: list[tuple]) -> None:
        for w in writes:
            p.call("send", *w)
        for r in p.call("flush")["records"]:
            txn.offsets.setdefault(tp(r["topic"], r["partition"]), []).append(r["offset"])

    def _settle_markers(self, txn: Txn) -> None:
        """Markers are the last records once LSO == HW, because scenarios write one thing at a time."""
        tps = [(k.rsplit("-", 1)[0], int(k.rsplit("-", 1)[1])) for k in txn.offsets]
        for k, hw in self.settle(tps).items():
            if hw - 1 <= max(txn.offsets[k]):
                raise RuntimeError(f"{k}: no marker after the transaction's data (hw {hw})")
            txn.marker_offsets[k] = hw - 1

    def tv_ck(self) -> int:
        """librdkafka speaks TV0/TV1: TV1 when the cluster finalized transaction.version >= 1 (4.x)."""
        return 0 if self.version.startswith("3.") or self.features.get("transaction.version", 2) == 0 else 1

    def idem_write(self, p: CkProducer, writes: list[tuple[str, int, bytes]], kind: str = "idempotent") -> list:
        """Non-transactional writes; for idempotent producers the first sequence per partition is the
        number of messages this client sent there before (librdkafka numbers per partition from 0)."""
        before = dict(p.sent_per_tp)
        for w in writes:  # (topic, partition, value) or, keyed, (topic, partition, key, value-or-None)
            p.send(w[0], w[1], w[-1], key=w[2] if len(w) == 4 else None)
        recs = p.flush()
        if kind == "plain":
            pid, epoch = -1, -1
        else:
            pid, epoch = p.identity()
        self.rec.write(p.name, kind, pid, epoch, recs,
                       None if kind == "plain" else {k: before.get(k, 0) for k in {tp(t, pp) for t, pp, _ in recs}})
        return recs


_CK = None


def _ck_version() -> str:
    global _CK
    if _CK is None:
        import confluent_kafka

        _CK = f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})"
        v, lv = confluent_kafka.version(), confluent_kafka.libversion()
        _CK = f"{v[0] if isinstance(v, tuple) else v} (librdkafka {lv[0] if isinstance(lv, tuple) else lv})"
    return _CK


# --------------------------------------------------------------------------------------------------
# Raw protocol (kafka-python's protocol layer)
# --------------------------------------------------------------------------------------------------
def build_batch(pid: int, epoch: int, seq: int, values: list[bytes], transactional: bool,
                keys: list[bytes] | None = None) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    now = int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(i, timestamp=now, key=keys[i] if keys else None, value=v, headers=[])
    return bytes(b.build())


def raw_produce(conn: RawConnection, topic: str, partition: int, batch: bytes, transactional_id: str | None) -> tuple[int, int]:
    """ProduceRequest v8 with one batch; returns (error_code, base_offset)."""
    from kafka.protocol.producer import ProduceRequest

    req = ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout_ms=10000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=batch)])])
    resp = conn.call(req, 8)
    pr = resp.responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


def raw_init_producer_id(conn: RawConnection, transactional_id: str | None = None) -> tuple[int, int, int]:
    from kafka.protocol.producer import InitProducerIdRequest

    req = InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1)
    r = conn.call(req, 3)
    return r.error_code, r.producer_id, r.producer_epoch


# --------------------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------------------
@dataclass
class Scenario:
    name: str
    version: str
    run: Callable[[Ctx], dict]
    overrides: dict = field(default_factory=dict)
    features: dict | None = None
    base: str | None = None  # mutated scenarios: the capture they derive from
    brokers: int = 1  # > 1: a KafkaCluster of that many combined broker+controller nodes
    node_overrides: dict | None = None  # {node_id: {property: value}} for one node of a cluster
    zookeeper: bool = False  # a ZooKeeper-mode broker (3.x) with its own ZooKeeper, not KRaft
    keep_preallocated_indexes: bool = False  # copy >= 1 MiB preallocated .index/.timeindex files too
    prepare: Callable[[], None] | None = None  # run before the broker is formatted (e.g. fetch a plugin jar)


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, version: str, **kw):
    def deco(fn):
        SCENARIOS[name] = Scenario(name, version, fn, **kw)
        return fn

    return deco


def val(tag: str, i: int) -> bytes:
    return f"{tag}-{i}".encode()


def _mixed_rounds(ctx: Ctx, rng: random.Random, a, b, j, idem, rounds: int = 24) -> None:
    """Transactions over ``orders`` 0-2 by two librdkafka producers (``a``, ``b``) and the Java
    producer ``j`` in turn (every 4th aborted), with idempotent writes of ``idem`` between them."""
    n = 0
    for r in range(rounds):
        outcome = "ABORT" if r % 4 == 3 else "COMMIT"
        parts = rng.sample(range(3), rng.choice([1, 2, 3]))
        writes = []
        for part in parts:
            for _ in range(rng.randint(1, 3)):
                writes.append(("orders", part, val(f"r{r}", n)))
                n += 1
        who = r % 3
        if who == 0:
            ctx.ck_txn(a, writes, outcome)
        elif who == 1:
            ctx.ck_txn(b, writes, outcome)
        else:
            ctx.java_txn(j, [(t, p, v.decode()) for t, p, v in writes], outcome)
        if r % 2 == 0:
            part = rng.randrange(3)
            ctx.idem_write(idem, [("orders", part, val("idem", r * 10 + k)) for k in range(rng.randint(1, 3))])


@scenario("clean", NEWEST)
def sc_clean(ctx: Ctx) -> dict:
    """Committed and aborted transactions by three transactional producers (two librdkafka on TV1, one
    Java client on TV2) over three partitions, idempotent and plain writes between them, one
    consume-transform-produce transaction with sendOffsetsToTransaction. Nothing is left open."""
    from confluent_kafka import Consumer, TopicPartition

    ctx.create_topic("orders", 3, 1024)
    ctx.create_topic("events", 1, 1024)
    rng = random.Random(7)
    a = ctx.ck("txn-a", **{"transactional.id": "orders-txn-a", "compression.type": "zstd"})
    b = ctx.ck("txn-b", **{"transactional.id": "orders-txn-b", "compression.type": "lz4"})
    j = ctx.java("txn-java", **{"transactional.id": "orders-txn-java", "compression.type": "gzip"})
    idem = ctx.ck("idem", **{"enable.idempotence": True, "compression.type": "snappy"})
    plain = ctx.ck("plain", **{"enable.idempotence": False, "acks": "1"})
    a.p.init_transactions(30)
    b.p.init_transactions(30)
    st = j.call("init")
    ctx.rec.producer("txn-a", client="confluent-kafka", kind="transactional", transactional_id="orders-txn-a", compression="zstd")
    ctx.rec.producer("txn-b", client="confluent-kafka", kind="transactional", transactional_id="orders-txn-b", compression="lz4")
    ctx.rec.producer("txn-java", client="kafka-clients (Java)", kind="transactional", transactional_id="orders-txn-java",
                     compression="gzip", tv2=st["tv2"])
    ctx.rec.producer("idem", client="confluent-kafka", kind="idempotent", compression="snappy")
    ctx.rec.producer("plain", client="confluent-kafka", kind="plain", compression="none")
    ctx.idem_write(plain, [("events", 0, val("event", i)) for i in range(6)], kind="plain")

    _mixed_rounds(ctx, rng, a, b, j, idem)

    # consume-transform-produce: read `events`, write `orders`, commit the group's offsets in the txn
    consumer = Consumer({"bootstrap.servers": ctx.broker.bootstrap, "group.id": "orders-etl",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "logger": ctx.client_log})
    consumer.assign([TopicPartition("events", 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 4 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m)
    positions = [TopicPartition("events", 0, got[-1].offset() + 1)]
    txn = ctx.ck_txn(a, [("orders", 0, b"etl-" + m.value()) for m in got], "COMMIT", offsets_from=(consumer, "orders-etl", positions))
    offsets_tp = txn.offset_commits[0]["offsets_partition"]
    otp = ("__consumer_offsets", int(offsets_tp.rsplit("-", 1)[1]))
    hw = ctx.settle([otp])
    txn.marker_offsets[offsets_tp] = hw[offsets_tp] - 1
    consumer.close()

    all_tps = [("orders", i) for i in range(3)] + [("events", 0), otp]
    ctx.record_end_offsets(all_tps)
    return {
        "description": sc_clean.__doc__,
        "expect": {"anomalies": []},
    }


@scenario("open-at-crash", NEWEST)
def sc_open_at_crash(ctx: Ctx) -> dict:
    """A transactional producer commits and aborts a few transactions, then opens one on both
    partitions of `payments` (data delivered, coordinator in Ongoing) and the broker is SIGKILLed.
    No marker follows the open transaction's data; the coordinator's last record for the id is Ongoing."""
    ctx.create_topic("payments", 2, 1024)
    p = ctx.ck("payments-txn", **{"transactional.id": "payments-txn"})
    p.p.init_transactions(30)
    ctx.rec.producer("payments-txn", client="confluent-kafka", kind="transactional", transactional_id="payments-txn")
    for r in range(10):
        ctx.ck_txn(p, [("payments", r % 2, val("pay", r)), ("payments", (r + 1) % 2, val("pay", 100 + r))],
                   "ABORT" if r in (2, 7) else "COMMIT")
    txn = ctx.ck_txn(p, [("payments", 0, val("open", 0)), ("payments", 0, val("open", 1)),
                         ("payments", 1, val("open", 2))], "OPEN")
    tps = [("payments", 0), ("payments", 1)]
    ctx.record_end_offsets(tps)
    ctx.ending = "kill"
    anomalies = []
    for k, offs in sorted(txn.offsets.items()):
        anomalies.append({
            "type": "open-transaction", "topic": k.rsplit("-", 1)[0], "partition": int(k.rsplit("-", 1)[1]),
            "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch,
            "transactional_id": txn.transactional_id, "first_offset": min(offs), "last_offset": max(offs),
            "coordinator_state": "Ongoing",
            "transaction_state_partition": tp("__transaction_state", coordinator_partition(txn.transactional_id)),
            "why": "broker SIGKILLed while the transaction was open: no marker, coordinator last wrote Ongoing",
        })
    return {"description": sc_open_at_crash.__doc__, "expect": {"anomalies": anomalies}}


def _late_write(ctx: Ctx, conn: RawConnection, p: CkProducer, txn_id: str, topic: str, part: int,
                seq: int, values: list[bytes], why: str, keys: list[bytes] | None = None) -> dict:
    pid, epoch = p.identity()
    err, off = raw_produce(conn, topic, part, build_batch(pid, epoch, seq, values, True, keys), txn_id)
    ctx.rec.raw.append({"request": "Produce v8 (kafka-python protocol layer)", "transactional_id": txn_id,
                        "partition": tp(topic, part), "producer_id": pid, "producer_epoch": epoch,
                        "base_sequence": seq, "records": len(values), "is_transactional": True,
                        "error_code": err, "base_offset": off, "why": why})
    if err != 0:
        raise RuntimeError(f"raw produce rejected with error {err}")
    if keys:
        for i, (k, v) in enumerate(zip(keys, values)):
            ctx.rec.keyed_record(topic, part, off + i, k, v is None, "raw")
    return {"producer_id": pid, "producer_epoch": epoch, "first_offset": off, "last_offset": off + len(values) - 1,
            "base_sequence": seq}


@scenario("hanging-late-write", PRE_VERIFICATION)
def sc_hanging_late_write(ctx: Ctx) -> dict:
    """KAFKA-12671 pattern on Kafka 3.5.2 (before transaction verification): a transaction on
    `transfers-0` is aborted (ABORT marker written), then a produce for the same producer id and
    epoch arrives late and is appended after the marker. It opens a transaction on transfers-0 that
    the coordinator does not know about: no marker will ever follow, the LSO stays at its offset.
    The producer keeps committing transactions on `transfers-1` afterwards."""
    ctx.create_topic("transfers", 2, 1024)
    p = ctx.ck("late-writer", **{"transactional.id": "transfers-txn"})
    p.p.init_transactions(30)
    ctx.rec.producer("late-writer", client="confluent-kafka", kind="transactional", transactional_id="transfers-txn")
    for r in range(6):
        ctx.ck_txn(p, [("transfers", 0, val("t", 2 * r)), ("transfers", 1, val("t", 2 * r + 1))], "COMMIT")
    aborted = ctx.ck_txn(p, [("transfers", 0, val("t", 4)), ("transfers", 0, val("t", 5))], "ABORT")
    # the retried/late batch: same producer id and epoch, next sequence on transfers-0 (TV0 keeps
    # counting across transactions within an epoch: librdkafka has sent sent_per_tp messages there)
    with RawConnection(ctx.broker.bootstrap) as conn:
        late = _late_write(ctx, conn, p, "transfers-txn", "transfers", 0, p.sent_per_tp["transfers-0"],
                           [b"late-0", b"late-1"], "late write after the ABORT marker of the previous transaction")
    for r in range(3):
        ctx.ck_txn(p, [("transfers", 1, val("after", r))], "COMMIT")
    tps = [("transfers", 0), ("transfers", 1)]
    ctx.record_end_offsets(tps)
    return {
        "description": sc_hanging_late_write.__doc__,
        "expect": {"anomalies": [{
            "type": "hanging-transaction", "topic": "transfers", "partition": 0,
            "producer_id": late["producer_id"], "producer_epoch": late["producer_epoch"],
            "transactional_id": "transfers-txn", "first_offset": late["first_offset"], "last_offset": late["last_offset"],
            "base_sequence": late["base_sequence"],
            "after_marker_offset": aborted.marker_offsets["transfers-0"],
            "last_stable_offset": ctx.rec.end_offsets["transfers-0"]["last_stable_offset"],
            "why": "transactional data after its transaction's ABORT marker; the coordinator completed "
                   "that transaction and later ones never include transfers-0",
        }]},
    }


@scenario("hanging-unadded-partition", PRE_VERIFICATION)
def sc_hanging_unadded(ctx: Ctx) -> dict:
    """On Kafka 3.5.2, a transactional producer writes to `accounts-0` through the normal path
    (AddPartitionsToTxn first) and, in the same transaction, a transactional batch lands on
    `accounts-1` without AddPartitionsToTxn (raw ProduceRequest). The commit writes a marker to
    accounts-0 only; accounts-1 holds an open transaction no coordinator knows about. An idempotent
    producer keeps writing to accounts-1 afterwards (HW moves, LSO stays)."""
    ctx.create_topic("accounts", 2, 1024)
    p = ctx.ck("txn", **{"transactional.id": "accounts-txn"})
    idem = ctx.ck("idem", **{"enable.idempotence": True})
    p.p.init_transactions(30)
    ctx.rec.producer("txn", client="confluent-kafka", kind="transactional", transactional_id="accounts-txn")
    ctx.rec.producer("idem", client="confluent-kafka", kind="idempotent")
    ctx.ck_txn(p, [("accounts", 0, val("a", 0))], "COMMIT")
    ctx.idem_write(idem, [("accounts", 1, val("i", k)) for k in range(2)])
    # the transaction: normal write to accounts-0, raw write to accounts-1, commit
    p.p.begin_transaction()
    pid, epoch = p.identity()
    txn = Txn("accounts-txn", "confluent-kafka " + _ck_version(), pid, epoch, ctx.tv_ck())
    p.send("accounts", 0, val("a", 1))
    for t, part, o in p.flush():
        txn.offsets.setdefault(tp(t, part), []).append(o)
    with RawConnection(ctx.broker.bootstrap) as conn:
        hang = _late_write(ctx, conn, p, "accounts-txn", "accounts", 1, 0, [b"unadded-0", b"unadded-1", b"unadded-2"],
                           "transactional write to a partition never added with AddPartitionsToTxn")
    p.p.commit_transaction(30)
    txn.outcome = "COMMIT"
    txn.marker_epoch = p.identity()[1]
    txn.note = ("accounts-1 offsets %d-%d were written in this transaction by a raw ProduceRequest without "
                "AddPartitionsToTxn; they are not in `partitions` because no marker covers them" % (hang["first_offset"], hang["last_offset"]))
    ctx.rec.txns.append(txn)
    ctx._settle_markers(txn)
    ctx.idem_write(idem, [("accounts", 1, val("i", k)) for k in range(2, 5)])
    ctx.ck_txn(p, [("accounts", 0, val("a", 2))], "COMMIT")
    ctx.record_end_offsets([("accounts", 0), ("accounts", 1)])
    return {
        "description": sc_hanging_unadded.__doc__,
        "expect": {"anomalies": [{
            "type": "hanging-transaction", "topic": "accounts", "partition": 1,
            "producer_id": hang["producer_id"], "producer_epoch": hang["producer_epoch"],
            "transactional_id": "accounts-txn", "first_offset": hang["first_offset"], "last_offset": hang["last_offset"],
            "base_sequence": 0,
            "last_stable_offset": ctx.rec.end_offsets["accounts-1"]["last_stable_offset"],
            "why": "transactional data on a partition the coordinator never added; the commit's markers "
                   "went to accounts-0 only",
        }]},
    }


@scenario("consumer-offsets-hanging", NEWEST)
def sc_consumer_offsets(ctx: Ctx) -> dict:
    """Consume-transform-produce (KIP-447): a consumer in group `etl-group` reads `input`, a
    transactional producer writes `output` and calls sendOffsetsToTransaction, and then never
    commits (the application is abandoned; its consumer leaves the group). The broker is stopped cleanly before the transaction timeout:
    `output-0` holds open transactional data and `__consumer_offsets` holds a transactional offset
    commit for the group with no marker (a pending offset commit: offset fetches that require stable
    offsets get UNSTABLE_OFFSET_COMMIT). An earlier consume-transform-produce round was committed."""
    from confluent_kafka import Consumer, TopicPartition

    ctx.create_topic("input", 1, 2048)
    ctx.create_topic("output", 1, 2048)
    src = ctx.ck("source", **{"enable.idempotence": True})
    ctx.rec.producer("source", client="confluent-kafka", kind="idempotent")
    ctx.idem_write(src, [("input", 0, val("in", i)) for i in range(10)])
    p = ctx.ck("etl", **{"transactional.id": "etl-txn", "transaction.timeout.ms": 300000})
    p.p.init_transactions(30)
    ctx.rec.producer("etl", client="confluent-kafka", kind="transactional", transactional_id="etl-txn",
                     transaction_timeout_ms=300000)
    consumer = Consumer({"bootstrap.servers": ctx.broker.bootstrap, "group.id": "etl-group",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "logger": ctx.client_log})
    consumer.subscribe(["input"])
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m)
    if len(got) < 10:
        raise RuntimeError(f"consumer got {len(got)} records")
    otp_name = tp("__consumer_offsets", coordinator_partition("etl-group"))
    otp = ("__consumer_offsets", coordinator_partition("etl-group"))
    first = ctx.ck_txn(p, [("output", 0, b"out-" + m.value()) for m in got[:5]], "COMMIT",
                       offsets_from=(consumer, "etl-group", [TopicPartition("input", 0, got[4].offset() + 1)]))
    first.marker_offsets[otp_name] = ctx.settle([otp])[otp_name] - 1
    txn = ctx.ck_txn(p, [("output", 0, b"out-" + m.value()) for m in got[5:]], "OPEN",
                     offsets_from=(consumer, "etl-group", [TopicPartition("input", 0, got[9].offset() + 1)]))
    ctx.record_end_offsets([("input", 0), ("output", 0), otp])
    consumer.close()
    pending = txn.offset_commits[0]
    return {
        "description": sc_consumer_offsets.__doc__,
        "expect": {"anomalies": [
            {"type": "open-transaction", "topic": "output", "partition": 0, "producer_id": txn.producer_id,
             "producer_epoch": txn.producer_epoch, "transactional_id": "etl-txn",
             "first_offset": min(txn.offsets["output-0"]), "last_offset": max(txn.offsets["output-0"]),
             "coordinator_state": "Ongoing",
             "why": "the application never committed; broker stopped before the transaction timeout (300 s)"},
            {"type": "pending-transactional-offset-commit", "topic": "__consumer_offsets", "partition": otp[1],
             "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch, "transactional_id": "etl-txn",
             "group_id": "etl-group", "committed_topic": pending["topic"], "committed_partition": pending["partition"],
             "committed_offset": pending["committed_offset"],
             "first_offset": ctx.rec.end_offsets[otp_name]["last_stable_offset"],
             "first_offset_source": "last stable offset of the __consumer_offsets partition reported by "
                                   "ListOffsets(read_committed) before shutdown (the client is not told the offset)",
             "why": "sendOffsetsToTransaction wrote a transactional offset commit that no marker completes"},
        ]},
    }


@scenario("consumer-offsets-late-commit", PRE_VERIFICATION)
def sc_consumer_offsets_late(ctx: Ctx) -> dict:
    """The hanging variant of KIP-447 pending offsets, on Kafka 3.5.2 (before transaction
    verification): a consume-transform-produce producer commits one transaction with
    sendOffsetsToTransaction and aborts the next; then a TxnOffsetCommit for the aborted transaction's
    producer id/epoch arrives late (raw request through kafka-python's protocol layer) and the group
    coordinator appends it to `__consumer_offsets` after the abort marker. No marker will ever complete
    it: the partition's LSO stays there and offset fetches that require stable offsets for the group
    are refused (UNSTABLE_OFFSET_COMMIT) until the producer id's state goes away."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from kafka.protocol.producer import TxnOffsetCommitRequest

    ctx.create_topic("input", 1, 1024)
    ctx.create_topic("output", 1, 1024)
    src = ctx.ck("source", **{"enable.idempotence": True})
    ctx.rec.producer("source", client="confluent-kafka", kind="idempotent")
    ctx.idem_write(src, [("input", 0, val("in", i)) for i in range(10)])
    p = ctx.ck("etl", **{"transactional.id": "late-offsets-txn"})
    p.p.init_transactions(30)
    ctx.rec.producer("etl", client="confluent-kafka", kind="transactional", transactional_id="late-offsets-txn")
    group = "late-group"
    otp_name = tp("__consumer_offsets", coordinator_partition(group))
    otp = ("__consumer_offsets", coordinator_partition(group))
    consumer = Consumer({"bootstrap.servers": ctx.broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "logger": ctx.client_log})
    consumer.assign([TopicPartition("input", 0, 0)])
    first = ctx.ck_txn(p, [("output", 0, b"out-0"), ("output", 0, b"out-1")], "COMMIT",
                       offsets_from=(consumer, group, [TopicPartition("input", 0, 5)]))
    first.marker_offsets[otp_name] = ctx.settle([otp])[otp_name] - 1
    aborted = ctx.ck_txn(p, [("output", 0, b"out-2")], "ABORT",
                         offsets_from=(consumer, group, [TopicPartition("input", 0, 8)]))
    aborted.marker_offsets[otp_name] = ctx.settle([otp])[otp_name] - 1
    pid, epoch = p.identity()
    req = TxnOffsetCommitRequest(
        transactional_id="late-offsets-txn", group_id=group, producer_id=pid, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None,
        topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name="input", partitions=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=8, committed_leader_epoch=-1, committed_metadata="")])])
    with RawConnection(ctx.broker.bootstrap) as conn:
        resp = conn.call(req, 3)
    err = resp.topics[0].partitions[0].error_code
    ctx.rec.raw.append({"request": "TxnOffsetCommit v3 (kafka-python protocol layer)",
                        "transactional_id": "late-offsets-txn", "group_id": group, "producer_id": pid,
                        "producer_epoch": epoch, "generation_id": -1, "offsets": {"input-0": 8},
                        "error_code": err, "why": "late offset commit after its transaction's ABORT marker"})
    if err != 0:
        raise RuntimeError(f"TxnOffsetCommit rejected with {err}")
    for r in range(2):
        ctx.ck_txn(p, [("output", 0, val("after", r))], "COMMIT")
    ctx.record_end_offsets([("input", 0), ("output", 0), otp])
    # what a read_committed consumer of the group sees: librdkafka asks for stable offsets
    # (OffsetFetch require_stable) and retries UNSTABLE_OFFSET_COMMIT until its timeout
    fetch_error = None
    try:
        consumer.committed([TopicPartition("input", 0)], timeout=3)
    except KafkaException as e:
        fetch_error = str(e)
    ctx.rec.producer("etl", committed_fetch_error=fetch_error)
    consumer.close()
    return {
        "description": sc_consumer_offsets_late.__doc__,
        "expect": {"anomalies": [{
            "type": "hanging-transactional-offset-commit", "topic": "__consumer_offsets", "partition": otp[1],
            "producer_id": pid, "producer_epoch": epoch, "transactional_id": "late-offsets-txn",
            "group_id": group, "committed_topic": "input", "committed_partition": 0, "committed_offset": 8,
            "after_marker_offset": aborted.marker_offsets[otp_name],
            "first_offset": ctx.rec.end_offsets[otp_name]["last_stable_offset"],
            "first_offset_source": "last stable offset of the __consumer_offsets partition reported by "
                                   "ListOffsets(read_committed) before shutdown",
            "read_committed_offset_fetch": fetch_error,
            "why": "transactional offset commit after its transaction's ABORT marker; no later transaction "
                   "of this producer sends offsets, so no marker completes it",
        }]},
    }


UNKNOWN_PRODUCER_EXPIRATION_MS = 6000  # producer.id.expiration.ms of the unknown-producer scenario


SHARE_STATE_PARTITIONS = 3  # share.coordinator.state.topic.num.partitions in the group-protocol scenarios
GROUP_PROTOCOL_OVERRIDES = {"share.coordinator.state.topic.num.partitions": SHARE_STATE_PARTITIONS,
                            "share.coordinator.state.topic.replication.factor": 1,
                            "share.coordinator.state.topic.min.isr": 1}


def _poll_n(consumer, n: int, timeout: float = 40.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        # Consumer.poll returns one message (or None), ShareConsumer.poll a batch (Messages)
        for x in ([] if m is None else [m] if hasattr(m, "error") else list(m)):
            if x.error() is None:
                got.append(x)
    if len(got) < n:
        raise RuntimeError(f"{type(consumer).__name__} got {len(got)} of {n} records")
    return got


def sc_group_protocols(ctx: Ctx) -> dict:
    """The KIP-848 consumer protocol and a KIP-932 share group. Consume-transform-produce: a consumer
    with group.protocol=consumer in group `etl-848` reads both partitions of `input`, a transactional
    producer writes `output` and calls sendOffsetsToTransaction with the consumer's group metadata
    (member id and epoch); the first round is committed, the second never is (the application is
    abandoned, its consumer leaves the group) and the broker is stopped cleanly before the
    transaction timeout: `__consumer_offsets` holds the consumer group's records (group, member,
    target and current assignment) and a pending transactional offset commit. A second consumer
    subscribes by regular expression (group `regex-848`: a ConsumerGroupRegularExpression record).
    A share consumer (group `share-grp`, share.auto.offset.reset=earliest) reads and accepts the
    records of `shared`: `__share_group_state` holds the share-partition's snapshot and updates."""
    from confluent_kafka import Consumer, ShareConsumer, TopicPartition
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    ctx.create_topic("input", 2, 2048)
    ctx.create_topic("output", 1, 2048)
    ctx.create_topic("shared", 1, 2048)
    src = ctx.ck("source", **{"enable.idempotence": True})
    ctx.rec.producer("source", client="confluent-kafka", kind="idempotent")
    ctx.idem_write(src, [("input", i % 2, val("in", i)) for i in range(12)])
    ctx.idem_write(src, [("shared", 0, val("sh", i)) for i in range(8)])
    p = ctx.ck("etl", **{"transactional.id": "etl-848-txn", "transaction.timeout.ms": 300000})
    p.p.init_transactions(30)
    ctx.rec.producer("etl", client="confluent-kafka", kind="transactional", transactional_id="etl-848-txn",
                     transaction_timeout_ms=300000)
    consumer = Consumer({"bootstrap.servers": ctx.broker.bootstrap, "group.id": "etl-848", "group.protocol": "consumer",
                         "client.id": "etl-consumer", "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "logger": ctx.client_log})
    consumer.subscribe(["input"])
    got = _poll_n(consumer, 12)
    member_id = consumer.memberid()
    assigned = sorted((x.topic, x.partition) for x in consumer.assignment())
    by_part: dict[int, list] = {}
    for m in got:
        by_part.setdefault(m.partition(), []).append(m)
    otp = ("__consumer_offsets", coordinator_partition("etl-848"))
    otp_name = tp(*otp)

    def positions(upto: int) -> list:
        return [TopicPartition("input", part, ms[upto].offset() + 1) for part, ms in sorted(by_part.items())]

    first = ctx.ck_txn(p, [("output", 0, b"out-" + m.value()) for m in got[:6]], "COMMIT",
                       offsets_from=(consumer, "etl-848", positions(2)))
    first.marker_offsets[otp_name] = ctx.settle([otp])[otp_name] - 1
    txn = ctx.ck_txn(p, [("output", 0, b"out-" + m.value()) for m in got[6:]], "OPEN",
                     offsets_from=(consumer, "etl-848", positions(5)))
    ctx.record_end_offsets([("input", 0), ("input", 1), ("output", 0), otp])
    pending_at = ctx.rec.end_offsets[otp_name]["last_stable_offset"]

    rx = Consumer({"bootstrap.servers": ctx.broker.bootstrap, "group.id": "regex-848", "group.protocol": "consumer",
                   "client.id": "regex-consumer", "enable.auto.commit": False, "auto.offset.reset": "earliest",
                   "logger": ctx.client_log})
    rx.subscribe(["^inp.*"])
    _poll_n(rx, 12)
    rx_member = rx.memberid()
    rx_assigned = sorted((x.topic, x.partition) for x in rx.assignment())
    rx.close()

    res = ConfigResource(ResourceType.GROUP, "share-grp", incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in ctx.admin.incremental_alter_configs([res]).values():
        f.result(30)
    share = ShareConsumer({"bootstrap.servers": ctx.broker.bootstrap, "group.id": "share-grp",
                           "client.id": "share-consumer", "logger": ctx.client_log})
    share.subscribe(["shared"])
    shared = _poll_n(share, 8)
    acks = share.commit_sync(30)  # implicit acknowledgement: every record returned by poll is accepted
    if any(e is not None for e in acks.values()):
        raise RuntimeError(f"share acknowledgements failed: {acks}")
    share.close()
    consumer.close()
    pending = txn.offset_commits
    return {
        "description": sc_group_protocols.__doc__,
        "expect": {"anomalies": [
            {"type": "open-transaction", "topic": "output", "partition": 0, "producer_id": txn.producer_id,
             "producer_epoch": txn.producer_epoch, "transactional_id": "etl-848-txn",
             "first_offset": min(txn.offsets["output-0"]), "last_offset": max(txn.offsets["output-0"]),
             "coordinator_state": "Ongoing",
             "why": "the application never committed; broker stopped before the transaction timeout (300 s)"},
            {"type": "pending-transactional-offset-commit", "topic": "__consumer_offsets", "partition": otp[1],
             "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch, "transactional_id": "etl-848-txn",
             "group_id": "etl-848", "group_protocol": "consumer", "member_id": member_id,
             "client_id": "etl-consumer", "assigned_partitions": [tp(t, pp) for t, pp in assigned],
             "committed": [{"topic": x["topic"], "partition": x["partition"], "committed_offset": x["committed_offset"]}
                           for x in pending],
             "first_offset": pending_at,
             "first_offset_source": "last stable offset of the __consumer_offsets partition reported by "
                                   "ListOffsets(read_committed) before shutdown (the client is not told the offset)",
             "why": "sendOffsetsToTransaction wrote a transactional offset commit that no marker completes"},
        ]},
        "groups": {
            "etl-848": {"protocol": "consumer", "offsets_partition": otp_name, "member_id": member_id,
                        "client_id": "etl-consumer", "subscribed_topics": ["input"],
                        "assigned_partitions": [tp(t, pp) for t, pp in assigned],
                        "why": "member id: Consumer.memberid() (KIP-848: the client generates it); assignment: "
                               "Consumer.assignment() after the records were polled"},
            "regex-848": {"protocol": "consumer", "offsets_partition": tp("__consumer_offsets", coordinator_partition("regex-848")),
                          "member_id": rx_member, "client_id": "regex-consumer", "subscribed_regex": "^inp.*",
                          "assigned_partitions": [tp(t, pp) for t, pp in rx_assigned]},
            "share-grp": {"protocol": "share", "client_id": "share-consumer", "topic": "shared", "partition": 0,
                          "delivered_offsets": sorted(m.offset() for m in shared),
                          "why": "every record ShareConsumer.poll() returned, accepted (implicit acknowledgement) and "
                                 "committed with commit_sync() before close()"},
        },
    }


scenario("group-protocols", NEWEST, overrides=GROUP_PROTOCOL_OVERRIDES, features={"share.version": 1})(sc_group_protocols)
scenario("group-protocols-4.4", "4.4.0", overrides=GROUP_PROTOCOL_OVERRIDES, features={"share.version": 1})(sc_group_protocols)


@scenario("unknown-producer", NEWEST, overrides={"log.retention.check.interval.ms": 500, "log.initial.task.delay.ms": 500,
                                                  "log.segment.delete.delay.ms": 500,
                                                  "producer.id.expiration.ms": UNKNOWN_PRODUCER_EXPIRATION_MS})
def sc_unknown_producer(ctx: Ctx) -> dict:
    """An idempotent producer P writes 12 single-record batches to `ledger-0` (sequences 0-11), a
    second idempotent producer Q writes 12 more (starting a new segment); DeleteRecords moves the log
    start offset to Q's first batch, past all of P's batches (their segments are deleted). Retention
    alone does not drop P's state (KIP-360: the producer snapshot still holds it); expiry does: the
    broker runs with producer.id.expiration.ms = 6 s (also set as its dynamic broker config,
    so the metadata log records it), P stays idle longer than that, the broker restarts and drops
    P's expired entry when it loads the snapshot, and P, still holding its producer id/epoch, writes
    again at sequence 12. The broker (2.5+) accepts a producer it has no state for at any sequence,
    so P's first retained batch starts at sequence 12: the on-disk trace of an UNKNOWN_PRODUCER_ID
    situation."""
    # segment.ms: the first append after 2 s of quiet rolls a new segment, so Q's first batch starts
    # one and the log can be cut exactly between P's last and Q's first batch
    ctx.create_topic("ledger", 1, 1024, **{"segment.ms": "2000"})
    P = ctx.ck("P", **{"enable.idempotence": True, "linger.ms": 0})
    Q = ctx.ck("Q", **{"enable.idempotence": True, "linger.ms": 0})
    ctx.rec.producer("P", client="confluent-kafka", kind="idempotent")
    ctx.rec.producer("Q", client="confluent-kafka", kind="idempotent")
    p_offsets = []
    for i in range(12):
        p_offsets += [o for _, _, o in ctx.idem_write(P, [("ledger", 0, val("p", i))])]
    time.sleep(2.5)
    q_offsets = []
    for i in range(12):
        q_offsets += [o for _, _, o in ctx.idem_write(Q, [("ledger", 0, val("q", i))])]
    part_dir = ctx.broker.log_dir / "ledger-0"
    bases = sorted(int(f.name.split(".")[0]) for f in part_dir.glob("*.log"))
    cut = min(q_offsets)
    if cut not in bases:
        raise RuntimeError(f"Q's first batch {cut} does not start a segment ({bases})")
    from confluent_kafka import TopicPartition

    res = ctx.admin.delete_records([TopicPartition("ledger", 0, cut)], request_timeout=10)
    low = list(res.values())[0].result().low_watermark
    deadline = time.monotonic() + 30
    while any(int(f.name.split(".")[0]) < cut for f in part_dir.glob("*.log")):
        if time.monotonic() > deadline:
            raise RuntimeError("segments below the new log start offset were not deleted")
        time.sleep(0.2)
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    expiry = str(UNKNOWN_PRODUCER_EXPIRATION_MS)
    entry = ConfigEntry("producer.id.expiration.ms", expiry, incremental_operation=AlterConfigOpType.SET)
    for fut in ctx.admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])]).values():
        fut.result()
    idle_since = time.time()
    time.sleep(UNKNOWN_PRODUCER_EXPIRATION_MS / 1000 + 2)  # P idle past its expiry before the broker reloads
    ctx.broker.restart()
    from confluent_kafka.admin import AdminClient

    ctx.admin = AdminClient({"bootstrap.servers": ctx.broker.bootstrap, "logger": ctx.client_log})
    pid, epoch = P.identity()
    again = ctx.idem_write(P, [("ledger", 0, val("p", 12 + i)) for i in range(3)])
    pid2, epoch2 = P.identity()
    if (pid2, epoch2) != (pid, epoch):
        raise RuntimeError(f"P changed identity {pid}/{epoch} -> {pid2}/{epoch2}")
    ctx.record_end_offsets([("ledger", 0)])
    return {
        "description": sc_unknown_producer.__doc__,
        "steps": {"delete_records_before_offset": cut, "log_start_offset_after_delete": low,
                  "p_deleted_offsets": p_offsets, "producer_id_expiration_ms": UNKNOWN_PRODUCER_EXPIRATION_MS,
                  "p_idle_seconds_before_restart": round(time.time() - idle_since, 1), "broker_restarted": True},
        "expect": {"anomalies": [{
            "type": "unknown-producer", "topic": "ledger", "partition": 0, "producer_id": pid,
            "producer_epoch": epoch, "first_offset": min(o for _, _, o in again), "base_sequence": 12,
            "log_start_offset": low,
            "why": "the producer's earlier batches (sequences 0-11) were removed by DeleteRecords; its first "
                   "retained batch starts at sequence 12, not 0. The producer snapshot written at the clean "
                   "shutdown before the restart still lists it, but idle longer than producer.id.expiration.ms: "
                   "the broker drops expired entries when it loads a snapshot, so after the restart it had no "
                   "state for it and accepted sequence 12 from an unknown producer",
        }]},
    }


@scenario("fencing", PRE_VERIFICATION)
def sc_fencing(ctx: Ctx) -> dict:
    """Transaction version 0 (Kafka 3.5.2). (1) A long-lived transactional producer runs 10
    transactions over `inventory` 0-1 with one producer epoch: sequences keep counting across
    transactions and markers carry the data epoch. (2) Zombie fencing: producer A (`inventory-fence`)
    commits one transaction and leaves a second open on inventory-0; producer B initialises the same
    transactional id. The coordinator bumps the epoch to fence A, aborts A's open transaction with the
    bumped epoch (ABORT marker epoch = A's epoch + 1), and gives B the next epoch; A's next commit fails
    as fenced. B then commits on both partitions."""
    ctx.create_topic("inventory", 2, 1024)
    long = ctx.ck("long-lived", **{"transactional.id": "inventory-long"})
    long.p.init_transactions(30)
    ctx.rec.producer("long-lived", client="confluent-kafka", kind="transactional", transactional_id="inventory-long")
    for r in range(10):
        ctx.ck_txn(long, [("inventory", r % 2, val("long", r)), ("inventory", (r + 1) % 2, val("long", 100 + r))],
                   "ABORT" if r in (3, 7) else "COMMIT")
    A = ctx.ck("zombie-A", **{"transactional.id": "inventory-fence"})
    A.p.init_transactions(30)
    ctx.rec.producer("zombie-A", client="confluent-kafka", kind="transactional", transactional_id="inventory-fence")
    ctx.ck_txn(A, [("inventory", 0, val("A", 0)), ("inventory", 1, val("A", 1))], "COMMIT")
    open_txn = ctx.ck_txn(A, [("inventory", 0, val("A", 2))], "OPEN")
    B = ctx.ck("fencer-B", **{"transactional.id": "inventory-fence"})
    B.p.init_transactions(60)
    ctx.rec.producer("fencer-B", client="confluent-kafka", kind="transactional", transactional_id="inventory-fence")
    b_pid, b_epoch = B.identity()
    hw = ctx.settle([("inventory", 0)])
    open_txn.outcome = "ABORT"
    open_txn.marker_offsets["inventory-0"] = hw["inventory-0"] - 1
    open_txn.marker_epoch = b_epoch - 1
    open_txn.note = ("aborted by the coordinator when fencer-B initialised the same transactional id; the "
                     "marker epoch is A's epoch + 1 (PrepareEpochFence), B received the following epoch")
    fenced_error = None
    try:
        A.p.commit_transaction(10)
    except Exception as e:  # noqa: BLE001 - the expected fencing error
        fenced_error = str(e)
    ctx.rec.producer("zombie-A", fenced_error=fenced_error)
    ctx.ck_txn(B, [("inventory", 0, val("B", 0)), ("inventory", 1, val("B", 1))], "COMMIT")
    ctx.record_end_offsets([("inventory", 0), ("inventory", 1)])
    return {
        "description": sc_fencing.__doc__,
        "expect": {"anomalies": [], "fencing": {
            "transactional_id": "inventory-fence", "producer_id": b_pid, "zombie_epoch": open_txn.producer_epoch,
            "fence_abort_marker_epoch": b_epoch - 1, "new_epoch": b_epoch,
            "zombie_commit_error": fenced_error}},
    }


@scenario("fencing-tv2", NEWEST)
def sc_fencing_tv2(ctx: Ctx) -> dict:
    """Transaction version 2 (Kafka 4.3.1, Kafka's Java producer). (1) A long-lived producer runs 8
    transactions: every commit/abort bumps the epoch, so each transaction's data carries epoch e, its
    markers e+1, and the next transaction starts at e+1 with sequence 0. (2) Zombie fencing: Java
    producer A leaves a transaction open on `ledger2-0`; producer B initialises the same transactional
    id; the coordinator aborts A's transaction with a bumped epoch and B gets a newer one."""
    ctx.create_topic("ledger2", 2, 1024)
    long = ctx.java("long-lived", **{"transactional.id": "ledger2-long"})
    st = long.call("init")
    ctx.rec.producer("long-lived", client="kafka-clients (Java)", kind="transactional", transactional_id="ledger2-long", tv2=st["tv2"])
    if not st["tv2"]:
        raise RuntimeError("Java client did not enable transaction version 2")
    for r in range(8):
        ctx.java_txn(long, [("ledger2", r % 2, f"long-{r}"), ("ledger2", (r + 1) % 2, f"long-{100 + r}")],
                     "ABORT" if r in (2, 5) else "COMMIT")
    A = ctx.java("zombie-A", **{"transactional.id": "ledger2-fence"})
    A.call("init")
    ctx.rec.producer("zombie-A", client="kafka-clients (Java)", kind="transactional", transactional_id="ledger2-fence")
    ctx.java_txn(A, [("ledger2", 0, "A-0")], "COMMIT")
    open_txn = ctx.java_txn(A, [("ledger2", 0, "A-1")], "OPEN")
    B = ctx.java("fencer-B", **{"transactional.id": "ledger2-fence"})
    stb = B.call("init")
    ctx.rec.producer("fencer-B", client="kafka-clients (Java)", kind="transactional", transactional_id="ledger2-fence")
    hw = ctx.settle([("ledger2", 0)])
    open_txn.outcome = "ABORT"
    open_txn.marker_offsets["ledger2-0"] = hw["ledger2-0"] - 1
    open_txn.marker_epoch = None
    open_txn.note = ("aborted by the coordinator when fencer-B initialised the same transactional id; "
                     "marker epoch is greater than A's epoch and lower than B's (the client does not see it)")
    err = A.call("commit", check=False)
    ctx.rec.producer("zombie-A", fenced_error=err.get("error"))
    ctx.java_txn(B, [("ledger2", 0, "B-0"), ("ledger2", 1, "B-1")], "COMMIT")
    ctx.record_end_offsets([("ledger2", 0), ("ledger2", 1)])
    return {
        "description": sc_fencing_tv2.__doc__,
        "expect": {"anomalies": [], "fencing": {
            "transactional_id": "ledger2-fence", "producer_id": stb["producer_id"],
            "zombie_epoch": open_txn.producer_epoch, "new_epoch": stb["producer_epoch"],
            "fence_abort_marker_epoch_between_exclusive": [open_txn.producer_epoch, stb["producer_epoch"]],
            "zombie_commit_error": err.get("error")}},
    }


@scenario("many-producers", NEWEST, overrides={"metadata.log.max.snapshot.interval.ms": 3000})
def sc_many_producers(ctx: Ctx) -> dict:
    """2,500 idempotent-producer initialisations (InitProducerId without a transactional id, as every
    idempotent producer sends at start, here through kafka-python's protocol layer on one connection)
    make the broker ask the controller for several producer-id blocks of 1000: the metadata log holds
    a ProducerIdsRecord per block, and a KRaft snapshot taken afterwards holds the latest. Every 250th
    producer id writes one record to `tiny-0`; 3 real idempotent librdkafka producers write too."""
    ctx.create_topic("tiny", 1, 4096)
    ids = []
    with RawConnection(ctx.broker.bootstrap) as conn:
        retries = 0
        for i in range(2500):
            deadline = time.monotonic() + 20
            while True:
                err, pid, epoch = raw_init_producer_id(conn)
                # 14 COORDINATOR_LOAD_IN_PROGRESS: the broker is still fetching its next block from
                # the controller; clients retry (as librdkafka and the Java client do)
                if err != 14 or time.monotonic() > deadline:
                    break
                retries += 1
                time.sleep(0.05)
            if err != 0:
                raise RuntimeError(f"InitProducerId error {err}")
            ids.append((pid, epoch))
        writes = []
        for i in range(0, 2500, 250):
            pid, epoch = ids[i]
            err, off = raw_produce(conn, "tiny", 0, build_batch(pid, epoch, 0, [val("id", pid)], False), None)
            if err != 0:
                raise RuntimeError(f"produce error {err}")
            writes.append({"producer": f"raw-{i}", "kind": "idempotent", "producer_id": pid, "producer_epoch": epoch,
                           "partition": "tiny-0", "record_offsets": [off], "first_sequence": 0})
    ctx.rec.writes += writes
    for n in range(3):
        p = ctx.ck(f"idem-{n}", **{"enable.idempotence": True})
        ctx.rec.producer(f"idem-{n}", client="confluent-kafka", kind="idempotent")
        ctx.idem_write(p, [("tiny", 0, val("ck", n))])
    time.sleep(4)  # let the controller take a metadata snapshot (interval 3 s)
    ctx.record_end_offsets([("tiny", 0)])
    pids = [p for p, _ in ids]
    return {
        "description": sc_many_producers.__doc__,
        "steps": {"init_producer_id_calls": len(ids), "coordinator_load_in_progress_retries": retries, "first_producer_id": pids[0], "last_producer_id": pids[-1],
                  "distinct_producer_ids": len(set(pids)), "epochs": sorted({e for _, e in ids})},
        "expect": {"anomalies": [], "producer_id_blocks": {
            "block_size": 1000, "issued_producer_ids": [min(pids), max(pids)],
            "min_blocks": (max(pids) - min(pids)) // 1000 + 1,
            "why": "ids were handed out from consecutive blocks of 1000; every issued id lies in a block "
                   "recorded by a ProducerIdsRecord; blocks do not overlap"}},
    }


@scenario("timeout-abort", NEWEST, overrides={"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500})
def sc_timeout_abort(ctx: Ctx) -> dict:
    """The coordinator aborts a transaction that exceeded its timeout (transaction.timeout.ms=2000):
    it fences the producer by bumping the epoch and writes ABORT markers carrying the bumped epoch,
    so the marker's epoch is greater than the data epoch (librdkafka, TV1). The producer's commit then
    fails as fenced (fatal for librdkafka); a new producer instance with the same transactional id
    initialises (next epoch) and commits one more transaction."""
    ctx.create_topic("slow", 2, 2048)
    p = ctx.ck("slow-txn", **{"transactional.id": "slow-txn", "transaction.timeout.ms": 2000})
    p.p.init_transactions(30)
    ctx.rec.producer("slow-txn", client="confluent-kafka", kind="transactional", transactional_id="slow-txn",
                     transaction_timeout_ms=2000)
    ctx.ck_txn(p, [("slow", 0, val("s", 0)), ("slow", 1, val("s", 1))], "COMMIT")
    txn = ctx.ck_txn(p, [("slow", 0, val("s", 2)), ("slow", 1, val("s", 3))], "OPEN")
    hw = ctx.settle([("slow", 0), ("slow", 1)], timeout=30)  # the coordinator's timeout abort
    txn.outcome = "ABORT"
    txn.marker_offsets = {k: v - 1 for k, v in hw.items()}
    txn.note = "aborted by the coordinator after transaction.timeout.ms; the client did not ask"
    err = None
    try:
        p.p.commit_transaction(10)
    except Exception as e:  # noqa: BLE001 - expected: the transaction was aborted under it
        err = str(e)
        try:
            p.p.abort_transaction(10)
        except Exception as e2:  # noqa: BLE001
            err += f" / abort: {e2}"
    ctx.rec.producer("slow-txn", commit_error=err)
    # librdkafka treats the fence as fatal: the application starts a new producer instance
    p2 = ctx.ck("slow-txn-restarted", **{"transactional.id": "slow-txn", "transaction.timeout.ms": 60000})
    p2.p.init_transactions(30)
    ctx.rec.producer("slow-txn-restarted", client="confluent-kafka", kind="transactional", transactional_id="slow-txn")
    later = ctx.ck_txn(p2, [("slow", 0, val("s", 4)), ("slow", 1, val("s", 5))], "COMMIT")
    pid2, epoch2 = later.producer_id, later.producer_epoch
    ctx.record_end_offsets([("slow", 0), ("slow", 1)])
    return {
        "description": sc_timeout_abort.__doc__,
        "expect": {"anomalies": [], "timeout_abort": {
            "transactional_id": "slow-txn", "producer_id": txn.producer_id, "data_epoch": txn.producer_epoch,
            "marker_offsets": txn.marker_offsets,
            "marker_epoch_greater_than": txn.producer_epoch,
            "next_transaction_identity": [pid2, epoch2]}},
    }


TWO_PC_MAX_TIMEOUT_MS = 4000  # the broker's transaction.max.timeout.ms in prepared-2pc


# InitProducerId v6 (Enable2Pc, KeepPreparedTxn) is latestVersionUnstable in 4.3.1 and 4.4.0: the broker
# advertises it only with unstable.api.versions.enable; without it the client falls back to v5, which
# drops Enable2Pc, and the coordinator validates the producer's default 60 s timeout against the maximum
@scenario("prepared-2pc", NEWEST, overrides={"transaction.two.phase.commit.enable": "true",
                                              "unstable.api.versions.enable": "true",
                                              "transaction.max.timeout.ms": TWO_PC_MAX_TIMEOUT_MS,
                                              "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500})
def sc_prepared_2pc(ctx: Ctx) -> dict:
    """Two-phase commit (KIP-939) on a broker with transaction.two.phase.commit.enable=true and
    transaction.max.timeout.ms=4000. Kafka's Java producer `2pc-txn` with
    transaction.two.phase.commit.enable=true (InitProducerId v6 with Enable2Pc: the coordinator stores
    the transaction timeout as Integer.MAX_VALUE) (1) writes a transaction to `twopc` 0-1, prepares it
    and completes it with its own prepared state (commit); (2) writes a second one (two records on
    twopc-0, one on twopc-1), prepares it and the producer process halts. A normal transactional
    producer `plain-txn` (transaction.timeout.ms=2000) then leaves a transaction open on `contrast-0`:
    the coordinator aborts it after its timeout, while the prepared 2PC transaction stays open past
    transaction.max.timeout.ms (its LSO still pinned when the broker stops cleanly)."""
    ctx.create_topic("twopc", 2, 2048)
    ctx.create_topic("contrast", 1, 2048)
    tid = "2pc-txn"
    a = ctx.java("2pc-txn", **{"transactional.id": tid, "transaction.two.phase.commit.enable": "true"})
    st = a.call("init2pc")
    ctx.rec.producer("2pc-txn", client=f"kafka-clients {ctx.version} (Java)", kind="transactional", transactional_id=tid,
                     two_phase_commit=True, tv2=st["tv2"])
    done = ctx.java_txn(a, [("twopc", 0, "c-0"), ("twopc", 1, "c-1")], "OPEN")
    prepared = a.call("prepare")["prepared"]
    st = a.call("complete", prepared)
    if st["completed"] != "commit":
        raise RuntimeError(f"complete with the prepared state {prepared} did not commit: {st}")
    done.outcome = "COMMIT"
    done.marker_epoch = st["producer_epoch"] if st["producer_id"] == done.producer_id else None
    ctx._settle_markers(done)
    done.note = f"prepared (state {prepared}) and completed with that state: committed"
    held = ctx.java_txn(a, [("twopc", 0, "p-0"), ("twopc", 0, "p-1"), ("twopc", 1, "p-2")], "OPEN")
    held_state = a.call("prepare")["prepared"]
    a.call("halt", check=False)
    a.proc.wait(timeout=30)
    prepared_at = time.time()
    held.note = (f"prepared (state {held_state}); the producer process then halted (Runtime.halt: no close, no "
                 "abort): the transaction waits for an external coordinator that never calls back")
    ctx.clients.remove(a)
    a.close()
    tps = [("twopc", 0), ("twopc", 1)]
    b = ctx.java("plain-txn", **{"transactional.id": "plain-txn", "transaction.timeout.ms": 2000})
    b.call("init")
    ctx.rec.producer("plain-txn", client=f"kafka-clients {ctx.version} (Java)", kind="transactional",
                     transactional_id="plain-txn", transaction_timeout_ms=2000)
    timed_out = ctx.java_txn(b, [("contrast", 0, "t-0")], "OPEN")
    hw = ctx.settle([("contrast", 0)], timeout=30)  # the coordinator's timeout abort
    timed_out.outcome = "ABORT"
    timed_out.marker_offsets = {k: v - 1 for k, v in hw.items()}
    timed_out.note = "aborted by the coordinator after transaction.timeout.ms; the client did not ask"
    # well past transaction.max.timeout.ms and several expiry passes (cleanup interval 500 ms)
    time.sleep(max(0.0, prepared_at + 3 * TWO_PC_MAX_TIMEOUT_MS / 1000 - time.time()))
    eo = ctx.end_offsets(tps)
    for k, offs in held.offsets.items():
        if eo[k]["last_stable_offset"] != min(offs) or eo[k]["high_watermark"] != max(offs) + 1:
            raise RuntimeError(f"{k}: the prepared 2PC transaction did not stay open: {eo[k]}, data {offs}")
    waited = round(time.time() - prepared_at, 1)
    ctx.record_end_offsets(tps + [("contrast", 0)])
    anomalies = []
    for k, offs in sorted(held.offsets.items()):
        anomalies.append({
            "type": "two-phase-commit-transaction", "topic": k.rsplit("-", 1)[0], "partition": int(k.rsplit("-", 1)[1]),
            "producer_id": held.producer_id, "producer_epoch": held.producer_epoch, "transactional_id": tid,
            "first_offset": min(offs), "last_offset": max(offs), "coordinator_state": "Ongoing",
            "transaction_timeout_ms": 2**31 - 1,
            "transaction_state_partition": tp("__transaction_state", coordinator_partition(tid)),
            "why": f"prepared two-phase-commit transaction: the coordinator never times it out (still open "
                   f"{waited} s after the prepare, transaction.max.timeout.ms {TWO_PC_MAX_TIMEOUT_MS}); it waits "
                   f"for the external coordinator's decision, not hanging",
        })
    return {
        "description": sc_prepared_2pc.__doc__,
        "steps": {"prepared_state": held_state, "completed_prepared_state": prepared,
                  "seconds_open_after_prepare_at_check": waited, "end_offsets_at_check": eo},
        "expect": {"anomalies": anomalies},
    }


# --------------------------------------------------------------------------------------------------
# Multi-broker and compaction scenarios (3-node KRaft clusters; compacted topics with a real cleaner)
# --------------------------------------------------------------------------------------------------
CLUSTER_OVERRIDES = {
    # a killed node is fenced (and its leaderships moved) after 4 s instead of 9 s
    "broker.session.timeout.ms": 4000,
    "broker.heartbeat.interval.ms": 500,
}
# broker side of "make the cleaner really run": idle cleaner threads look again after 250 ms (not 15 s);
# files the cleaner replaces are renamed *.deleted and kept 10 min (deleted asynchronously after that)
CLEANER_OVERRIDES = {"log.cleaner.backoff.ms": 250, "log.segment.delete.delay.ms": 600000}
DELETE_RETENTION_MS = 1500


def compacted_topic_config() -> dict[str, str]:
    """Topic side: clean as soon as 1% is dirty, tombstones and the markers of emptied transactions
    become removable 1.5 s after the pass that emptied them (a second pass removes them), keep the
    replaced segments' files for 10 min, roll a segment whose first batch is 2 s old."""
    return {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
            "delete.retention.ms": str(DELETE_RETENTION_MS), "file.delete.delay.ms": "600000", "segment.ms": "2000"}


def read_offset_checkpoint(path: Path) -> dict[str, int]:
    """``cleaner-offset-checkpoint`` / ``replication-offset-checkpoint``: version, count, then
    ``topic partition offset`` lines."""
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines()[2:]:
        parts = line.split()
        if len(parts) == 3:
            out[f"{parts[0]}-{parts[1]}"] = int(parts[2])
    return out


def scan_partition_dir(part_dir: Path) -> dict:
    """What the live segments (``*.log``, not ``.deleted``/``.cleaned``/``.swap``) of a partition hold:
    record offsets, batches, emptied batches (record count 0, kept for producer state), control
    records (markers), tombstones, batches with the delete-horizon flag (attributes bit 6, KIP-534).
    Framing from the batch headers, records through kafka-python's DefaultRecordBatch."""
    from kafka.record.default_records import DefaultRecordBatch

    offsets: set[int] = set()
    st = {"segments": 0, "batches": 0, "empty_batches": 0, "markers": 0, "tombstones": 0, "delete_horizon_batches": 0}
    for seg in sorted(part_dir.glob("*.log")):
        st["segments"] += 1
        buf = seg.read_bytes()
        for pos, size, _base in _batches(buf):
            st["batches"] += 1
            attrs = struct.unpack_from(">h", buf, pos + 21)[0]
            if struct.unpack_from(">i", buf, pos + 57)[0] == 0:
                st["empty_batches"] += 1
            if attrs & 0x40:
                st["delete_horizon_batches"] += 1
            control = bool(attrs & 0x20)
            for r in DefaultRecordBatch(bytes(buf[pos: pos + size])):
                offsets.add(r.offset)
                if control:
                    st["markers"] += 1
                elif r.value is None:
                    st["tombstones"] += 1
    files = sorted(f.name for f in part_dir.iterdir())
    st["records"] = len(offsets)
    st["log_end"] = max(offsets) + 1 if offsets else None
    st["deleted_files"] = [f for f in files if f.endswith(".deleted")]
    st["cleaned_or_swap_files"] = [f for f in files if f.endswith((".cleaned", ".swap"))]
    st["_offsets"] = offsets
    return st


def compaction_state(ctx: Ctx, topic: str, parts: list[int]) -> dict[str, dict[str, dict]]:
    """Per broker (``broker-<id>``) and partition: the cleaner-offset-checkpoint entry and what
    :func:`scan_partition_dir` sees, with the written totals from the clients' bookkeeping."""
    written_markers: dict[str, int] = {}
    for t in ctx.rec.txns:
        for k in t.marker_offsets:
            written_markers[k] = written_markers.get(k, 0) + 1
    out: dict[str, dict[str, dict]] = {}
    for node, d in ctx.log_dirs().items():
        ck = read_offset_checkpoint(d / "cleaner-offset-checkpoint")
        for p in parts:
            k = tp(topic, p)
            st = scan_partition_dir(d / k)
            offs = st.pop("_offsets")
            end = st["log_end"] or 0
            keyed = ctx.rec.keyed.get(k, [])
            st.update({
                "cleaner_checkpoint": ck.get(k),
                "offset_holes": end - len(offs),
                "records_written": len([o for o, *_ in keyed]) + written_markers.get(k, 0),
                "tombstones_written": sum(1 for _, _, tomb, _ in keyed if tomb),
                "markers_written": written_markers.get(k, 0),
            })
            out.setdefault(f"broker-{node}", {})[k] = st
    return out


def wait_compaction(ctx: Ctx, topic: str, parts: list[int], nodes: list[int], cond: Callable[[dict], bool],
                    what: str, timeout: float = 90.0) -> dict:
    """Poll :func:`compaction_state` until ``cond`` holds for every partition on each of ``nodes``."""
    deadline = time.monotonic() + timeout
    while True:
        state = compaction_state(ctx, topic, parts)
        if all(cond(state[f"broker-{n}"][tp(topic, p)]) for n in nodes for p in parts):
            return state
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not reached after {timeout}s: {json.dumps(state, indent=1)}")
        time.sleep(0.5)


def first_pass_done(st: dict) -> bool:
    """The cleaner has cleaned the partition at least once: checkpoint entry, offsets removed, the
    replaced segments' files renamed *.deleted."""
    return bool(st["cleaner_checkpoint"]) and st["offset_holes"] > 0 and bool(st["deleted_files"])


def second_pass_done(st: dict) -> bool:
    """A later pass removed tombstones and markers of emptied transactions whose delete horizon passed."""
    return first_pass_done(st) and st["markers"] < st["markers_written"] and st["tombstones"] < st["tombstones_written"]


def _kv_round(ctx: Ctx, rng: random.Random, r: int, topic: str, parts: list[int], tag: str,
              keys: int = 6, tomb_p: float = 0.2) -> list[tuple]:
    """Keyed writes for one transaction: 1-3 records per partition over a small key space, some tombstones."""
    writes = []
    for part in parts:
        for i in range(rng.randint(1, 3)):
            k = f"k{rng.randrange(keys)}"
            v = None if rng.random() < tomb_p else f"{tag}{r}.{i}"
            writes.append((topic, part, k, v))
    return writes


def _ck_kv(writes: list[tuple]) -> list[tuple]:
    """librdkafka wants bytes: keys encoded, tombstone values stay None."""
    return [(t, p, k.encode(), None if v is None else v.encode()) for t, p, k, v in writes]


def _cluster_internal_topics(ctx: Ctx) -> list[str]:
    md = ctx.admin.list_topics(timeout=10)
    return [t for t in ("__transaction_state", "__consumer_offsets") if t in md.topics and md.topics[t].error is None]


@scenario("cluster-rf3", NEWEST, brokers=3, overrides=dict(CLUSTER_OVERRIDES))
def sc_cluster_rf3(ctx: Ctx) -> dict:
    """Three KRaft nodes (each broker+controller, 3-voter quorum). `orders` (3 partitions) and
    `__transaction_state` have replication factor 3 and min.insync.replicas 2. Two librdkafka
    transactional producers (TV1) and Kafka's Java producer (TV2) commit and abort 24 transactions
    over `orders`, an idempotent producer writes between them (acks=all). Every replica is in the ISR
    when the three nodes are shut down cleanly together. Nothing is left open."""
    ctx.create_topic("orders", 3, 1024, **{"min.insync.replicas": "2"})
    placement = ctx.partitions("orders")
    rng = random.Random(23)
    a = ctx.ck("txn-a", **{"transactional.id": "rf3-txn-a", "compression.type": "zstd"})
    b = ctx.ck("txn-b", **{"transactional.id": "rf3-txn-b"})
    j = ctx.java("txn-java", **{"transactional.id": "rf3-txn-java"})
    idem = ctx.ck("idem", **{"enable.idempotence": True, "compression.type": "lz4"})
    a.p.init_transactions(30)
    b.p.init_transactions(30)
    st = j.call("init")
    if not st["tv2"]:
        raise RuntimeError("Java client did not enable transaction version 2")
    ctx.rec.producer("txn-a", client="confluent-kafka", kind="transactional", transactional_id="rf3-txn-a", compression="zstd")
    ctx.rec.producer("txn-b", client="confluent-kafka", kind="transactional", transactional_id="rf3-txn-b", compression="none")
    ctx.rec.producer("txn-java", client="kafka-clients (Java)", kind="transactional", transactional_id="rf3-txn-java",
                     tv2=st["tv2"])
    ctx.rec.producer("idem", client="confluent-kafka", kind="idempotent", compression="lz4", acks="all")
    _mixed_rounds(ctx, rng, a, b, j, idem)
    internal = _cluster_internal_topics(ctx)
    isr = ctx.wait_isr_full(["orders"] + internal)
    ctx.record_end_offsets([("orders", i) for i in range(3)])
    ctx.ending_text = "clean shutdown (SIGTERM) of all 3 nodes at once, every replica in the ISR"
    return {
        "description": sc_cluster_rf3.__doc__,
        "steps": {"placement_at_create": {tp("orders", p): v for p, v in placement.items()},
                  "isr_before_shutdown": isr},
        "expect": {"anomalies": []},
    }


@scenario("compacted-transactions", NEWEST, brokers=3, overrides={**CLUSTER_OVERRIDES, **CLEANER_OVERRIDES})
def sc_compacted_transactions(ctx: Ctx) -> dict:
    """Three KRaft nodes, `kv` (2 partitions, replication factor 3, min.insync.replicas 2) with
    cleanup.policy=compact, written by a librdkafka transactional producer (TV1), Kafka's Java producer
    (TV2) and an idempotent producer: keyed records over 6 keys per partition, repeated keys, tombstones
    (null values), committed and aborted transactions. The log cleaner runs for real on every node
    (1% dirty ratio, 1 KiB segments, 250 ms cleaner backoff): aborted data and overwritten keys are
    removed, batches emptied, and after delete.retention.ms (1.5 s) a second pass removes tombstones
    and the markers of emptied transactions. Replaced segments stay as *.deleted files (10 min delay).
    After the first phase was cleaned on all three nodes, node 3 is restarted with log.cleaner.enable=false
    and a second phase is written: nodes 1 and 2 clean it, node 3 does not, so the replicas hold different
    compacted subsets of the same log. All transactions complete; clean shutdown."""
    topic, parts = "kv", [0, 1]
    ctx.create_topic(topic, 2, 1024, **{"min.insync.replicas": "2"}, **compacted_topic_config())
    rng = random.Random(31)
    a = ctx.ck("txn-a", **{"transactional.id": "kv-txn-a"})
    j = ctx.java("txn-java", **{"transactional.id": "kv-txn-java"})
    idem = ctx.ck("idem", **{"enable.idempotence": True})
    a.p.init_transactions(30)
    st = j.call("init")
    if not st["tv2"]:
        raise RuntimeError("Java client did not enable transaction version 2")
    ctx.rec.producer("txn-a", client="confluent-kafka", kind="transactional", transactional_id="kv-txn-a")
    ctx.rec.producer("txn-java", client="kafka-clients (Java)", kind="transactional", transactional_id="kv-txn-java", tv2=True)
    ctx.rec.producer("idem", client="confluent-kafka", kind="idempotent")

    def phase(rounds: range, tag: str) -> None:
        for r in rounds:
            outcome = "ABORT" if r % 4 == 3 else "COMMIT"
            writes = _kv_round(ctx, rng, r, topic, parts, tag)
            if r % 2 == 0:
                ctx.ck_txn(a, _ck_kv(writes), outcome)
            else:
                ctx.java_txn(j, [(t, p, k, v) for t, p, k, v in writes], outcome)
            if r % 3 == 1:
                part = rng.choice(parts)
                ctx.idem_write(idem, _ck_kv([(topic, part, f"k{rng.randrange(6)}", None if rng.random() < 0.25 else f"i{r}")
                                             for _ in range(2)]))

    phase(range(0, 20), "p1-")
    t0 = time.monotonic()
    s1 = wait_compaction(ctx, topic, parts, [1, 2, 3], first_pass_done, "first cleaner pass on all nodes")
    first_pass_s = time.monotonic() - t0
    checkpoints_phase1 = {b: {k: v["cleaner_checkpoint"] for k, v in d.items()} for b, d in s1.items()}
    # node 3's cleaner stops: restart it with the (deprecated, still accepted in 4.3.1) log.cleaner.enable=false
    ctx.broker.restart_node(3, {"log.cleaner.enable": "false"})
    isr_after_restart = ctx.wait_isr_full([topic] + _cluster_internal_topics(ctx))
    phase(range(20, 36), "p2-")

    t0 = time.monotonic()
    s2 = wait_compaction(ctx, topic, parts, [1, 2], second_pass_done, "second cleaner pass on nodes 1 and 2")
    second_pass_s = time.monotonic() - t0
    for k in (tp(topic, p) for p in parts):
        c3 = s2["broker-3"][k]["cleaner_checkpoint"]
        if c3 != checkpoints_phase1["broker-3"][k]:
            raise RuntimeError(f"node 3 cleaned {k} with its cleaner disabled ({checkpoints_phase1['broker-3'][k]} -> {c3})")
        for b in ("broker-1", "broker-2"):
            if not s2[b][k]["cleaner_checkpoint"] > c3:
                raise RuntimeError(f"{b} {k}: cleaner checkpoint {s2[b][k]['cleaner_checkpoint']} not past node 3's {c3}")
    internal = _cluster_internal_topics(ctx)
    isr = ctx.wait_isr_full([topic] + internal)
    ctx.record_end_offsets([(topic, p) for p in parts])
    ctx.ending_text = "clean shutdown (SIGTERM) of all 3 nodes at once, every replica in the ISR"

    def verify() -> dict:
        final = compaction_state(ctx, topic, parts)
        for b, d in final.items():
            for k, st_ in d.items():
                if not st_["cleaner_checkpoint"] or not st_["offset_holes"]:
                    raise RuntimeError(f"{b} {k}: not compacted at capture ({st_})")
                if b != "broker-3" and not (st_["deleted_files"] and second_pass_done(st_)):
                    raise RuntimeError(f"{b} {k}: no .deleted files or no second pass at capture ({st_})")
        return {"compaction_at_capture": final,
                "verified": "on the stopped log dirs, before copying: every node has a cleaner-offset-checkpoint "
                            "entry for kv-0 and kv-1 and offset holes there (records removed, batches emptied); "
                            "nodes 1 and 2 hold *.deleted files of replaced segments and have removed tombstones and "
                            "markers (a second pass after delete.retention.ms); node 3's checkpoint is the one of "
                            "phase 1 (its *.deleted files were removed when it restarted: the log loader deletes "
                            "them), below nodes 1 and 2"}

    ctx.after_stop.append(verify)
    return {
        "description": sc_compacted_transactions.__doc__,
        "steps": {"topic_config": compacted_topic_config(), "delete_retention_ms": DELETE_RETENTION_MS,
                  "phase1_rounds": 20, "phase2_rounds": 16,
                  "first_pass_wait_s": round(first_pass_s, 1), "second_pass_wait_s": round(second_pass_s, 1),
                  "cleaner_checkpoints_after_phase1": checkpoints_phase1,
                  "node3_restarted_with": {"log.cleaner.enable": "false"},
                  "isr_after_node3_restart": isr_after_restart,
                  "compaction_before_shutdown": s2, "isr_before_shutdown": isr},
        "expect": {"anomalies": []},
    }


CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}  # ControlRecordType: key = version (int16) + type (int16)


def batch_at(part_dir: Path, base_offset: int) -> dict | None:
    """The v2 batch at ``base_offset`` in a partition's live segments (``*.log``), from its header
    (attributes: 0x10 transactional, 0x20 control, 0x40 delete horizon; record count) and, for a
    control batch, its control record's type; None when no live segment holds a batch there."""
    from kafka.record.default_records import DefaultRecordBatch

    for seg in sorted(part_dir.glob("*.log")):
        try:
            buf = seg.read_bytes()
        except FileNotFoundError:  # replaced by the cleaner meanwhile (renamed *.deleted): look again later
            return None
        for pos, size, base in _batches(buf):
            if base != base_offset:
                continue
            attrs = struct.unpack_from(">h", buf, pos + 21)[0]
            control = bool(attrs & 0x20)
            out = {"segment": seg.name, "last_offset_delta": struct.unpack_from(">i", buf, pos + 23)[0],
                   "producer_id": struct.unpack_from(">q", buf, pos + 43)[0],
                   "producer_epoch": struct.unpack_from(">h", buf, pos + 51)[0],
                   "base_sequence": struct.unpack_from(">i", buf, pos + 53)[0],
                   "record_count": struct.unpack_from(">i", buf, pos + 57)[0],
                   "is_transactional": bool(attrs & 0x10), "is_control": control,
                   "has_delete_horizon": bool(attrs & 0x40), "control_type": None}
            if control:
                for r in DefaultRecordBatch(bytes(buf[pos: pos + size])):
                    out["control_type"] = CONTROL_TYPES.get(struct.unpack(">hh", r.key)[1], "OTHER")
                    break
            return out
    return None


def emptied_marker(b: dict | None) -> bool:
    """A control batch the cleaner emptied and kept (BatchRetention.RETAIN_EMPTY): no record left."""
    return bool(b) and b["is_control"] and b["record_count"] == 0 and b["control_type"] is None


def full_abort(b: dict | None) -> bool:
    return bool(b) and b["is_control"] and b["record_count"] == 1 and b["control_type"] == "ABORT"


LAG_TOPIC_CONFIG = {**compacted_topic_config(), "file.delete.delay.ms": "1000"}


@scenario("compacted-cleaner-lag", NEWEST, brokers=3, overrides={**CLUSTER_OVERRIDES, **CLEANER_OVERRIDES},
          node_overrides={3: {"log.cleaner.enable": "false"}})
def sc_compacted_cleaner_lag(ctx: Ctx) -> dict:
    """Three KRaft nodes, `kvlag` (1 partition, replication factor 3, min.insync.replicas 2) with
    cleanup.policy=compact; node 3 runs with log.cleaner.enable=false from the start, so its replica is
    never cleaned while nodes 1 and 2 clean theirs. Kafka's Java producer (TV2: every commit/abort bumps
    the epoch, markers carry data epoch + 1) commits three keyed transactions and aborts a fourth, its
    last: the ABORT marker, with the bumped epoch, is the producer's last batch on the partition. An
    idempotent producer then keeps overwriting the same keys, a few records every 2.2 s (segment.ms 2 s
    rolls a segment each time), so that the cleaners of nodes 1 and 2 make pass after pass: they remove
    the aborted data, then stamp a delete horizon on the marker of the now empty transaction, and after
    delete.retention.ms (1.5 s) remove its control record but keep the batch, emptied (record count 0),
    because it is the producer's last (LogCleaner: isBatchLastRecordOfProducer, BatchRetention.RETAIN_EMPTY).
    Node 3 still holds the aborted data and the ABORT marker with its record. Clean shutdown; nothing is
    left open."""
    topic, part = "kvlag", 0
    k = tp(topic, part)
    ctx.create_topic(topic, 1, 1024, **{"min.insync.replicas": "2"}, **LAG_TOPIC_CONFIG)
    placement = ctx.partitions(topic)
    j = ctx.java("txn-java", **{"transactional.id": "kvlag-txn-java"})
    idem = ctx.ck("idem", **{"enable.idempotence": True})
    st = j.call("init")
    if not st["tv2"]:
        raise RuntimeError("Java client did not enable transaction version 2")
    ctx.rec.producer("txn-java", client="kafka-clients (Java)", kind="transactional", transactional_id="kvlag-txn-java",
                     tv2=True)
    ctx.rec.producer("idem", client="confluent-kafka", kind="idempotent")
    for r, outcome in enumerate(("COMMIT", "COMMIT", "COMMIT", "ABORT")):
        last = ctx.java_txn(j, [(topic, part, f"k{i}", f"t{r}.{i}") for i in range(3)], outcome)
    marker = last.marker_offsets[k]
    if last.marker_epoch != last.producer_epoch + 1:
        raise RuntimeError(f"TV2 abort: marker epoch {last.marker_epoch}, data epoch {last.producer_epoch}")

    def at_marker() -> dict[str, dict | None]:
        return {f"broker-{n}": batch_at(d / k, marker) for n, d in ctx.log_dirs().items()}

    # the cleaner cleans only below the active segment and again only when the log is dirty: each nudge
    # writes into a new segment (the previous one is older than segment.ms) and rolls the last one
    t0 = time.monotonic()
    nudges = 0
    while True:
        seen = at_marker()
        if emptied_marker(seen["broker-1"]) and emptied_marker(seen["broker-2"]):
            break
        if nudges >= 30:
            raise RuntimeError(f"marker at {k}:{marker} not emptied on nodes 1 and 2 after {nudges} nudges: {seen}")
        ctx.idem_write(idem, _ck_kv([(topic, part, f"k{(nudges + i) % 3}", f"n{nudges}.{i}") for i in range(2)]))
        nudges += 1
        time.sleep(2.2)
    emptied_s = time.monotonic() - t0
    if not full_abort(seen["broker-3"]):
        raise RuntimeError(f"node 3 does not hold the ABORT marker at {k}:{marker} with its record: {seen['broker-3']}")
    isr = ctx.wait_isr_full([topic] + _cluster_internal_topics(ctx))
    ctx.record_end_offsets([(topic, part)])
    ctx.ending_text = "clean shutdown (SIGTERM) of all 3 nodes at once, every replica in the ISR"

    def verify() -> dict:
        final = at_marker()
        ck = {b: read_offset_checkpoint(d / "cleaner-offset-checkpoint").get(k) for b, d in
              ((f"broker-{n}", d) for n, d in ctx.log_dirs().items())}
        emptied = [b for b, x in final.items() if emptied_marker(x)]
        full = [b for b, x in final.items() if full_abort(x)]
        if sorted(emptied) != ["broker-1", "broker-2"] or full != ["broker-3"]:
            raise RuntimeError(f"{k}:{marker}: expected an emptied control batch on nodes 1 and 2 and the full ABORT "
                               f"marker on node 3: {final}")
        for b, x in final.items():
            if (x["producer_id"], x["producer_epoch"]) != (last.producer_id, last.marker_epoch):
                raise RuntimeError(f"{b} {k}:{marker}: not the marker of {last.producer_id}/{last.marker_epoch}: {x}")
        if ck["broker-3"] is not None or not (ck["broker-1"] and ck["broker-2"]):
            raise RuntimeError(f"cleaner-offset-checkpoint entries for {k}: {ck} (node 3 must have none)")
        return {"marker_offset": marker, "batch_at_marker": final, "cleaner_checkpoints": ck,
                "compaction_at_capture": compaction_state(ctx, topic, [part]),
                "verified": f"on the stopped log dirs, before copying, with the script's batch-header parser: at "
                            f"{k} offset {marker} nodes 1 and 2 hold a control batch with 0 records (emptied: no "
                            "control record, so no control type) of the Java producer's last epoch, node 3 the "
                            "ABORT marker with its control record; nodes 1 and 2 have a cleaner-offset-checkpoint "
                            "entry for the partition, node 3 none"}

    ctx.after_stop.append(verify)
    return {
        "description": sc_compacted_cleaner_lag.__doc__,
        "steps": {"topic_config": LAG_TOPIC_CONFIG, "delete_retention_ms": DELETE_RETENTION_MS,
                  "placement_at_create": {k: placement[part]},
                  "node3_cleaner": {"log.cleaner.enable": "false"}, "last_abort_marker_offset": marker,
                  "nudges": nudges, "emptied_after_s": round(emptied_s, 1),
                  "batch_at_marker_before_shutdown": seen, "isr_before_shutdown": isr},
        "expect": {"anomalies": []},
    }


@scenario("leader-killed", NEWEST, brokers=3, overrides=dict(CLUSTER_OVERRIDES))
def sc_leader_killed(ctx: Ctx) -> dict:
    """Three KRaft nodes, `payments` (2 partitions, replication factor 3, min.insync.replicas 2). A
    librdkafka transactional producer (TV1), Kafka's Java producer (TV2) and an idempotent producer
    (acks=all) write; while the two transactions are open on payments-0 and the idempotent producer is
    writing there, the leader of payments-0 is SIGKILLed. The controller fences it and moves
    leadership; the producers go on with the new leader and both transactions commit normally. The
    killed node is restarted (log recovery, truncation to the leader's log), catches up until every
    ISR is full again, a few more transactions run, and all three nodes shut down cleanly."""
    topic = "payments"
    ctx.create_topic(topic, 2, 2048, **{"min.insync.replicas": "2"})
    t = ctx.ck("txn", **{"transactional.id": "payments-txn"})
    j = ctx.java("txn-java", **{"transactional.id": "payments-txn-java"})
    idem = ctx.ck("idem", **{"enable.idempotence": True})
    t.p.init_transactions(30)
    st = j.call("init")
    if not st["tv2"]:
        raise RuntimeError("Java client did not enable transaction version 2")
    ctx.rec.producer("txn", client="confluent-kafka", kind="transactional", transactional_id="payments-txn")
    ctx.rec.producer("txn-java", client="kafka-clients (Java)", kind="transactional", transactional_id="payments-txn-java", tv2=True)
    ctx.rec.producer("idem", client="confluent-kafka", kind="idempotent", acks="all")
    for r in range(6):
        outcome = "ABORT" if r == 4 else "COMMIT"
        if r % 2 == 0:
            ctx.ck_txn(t, [(topic, 0, val("t", r)), (topic, 1, val("t", 100 + r))], outcome)
        else:
            ctx.java_txn(j, [(topic, 0, f"j-{r}"), (topic, 1, f"j-{100 + r}")], outcome)
        ctx.idem_write(idem, [(topic, r % 2, val("i", r))])
    before = ctx.partitions(topic)
    txn_state_before = ctx.partitions("__transaction_state")
    victim = before[0]["leader"]
    idem_identity_before = idem.identity()
    # two transactions open on payments-0 (and payments-1), idempotent data in between
    tx = ctx.ck_txn(t, [(topic, 0, val("kill-t", 0)), (topic, 0, val("kill-t", 1)), (topic, 1, val("kill-t", 2))], "OPEN")
    jx = ctx.java_txn(j, [(topic, 0, "kill-j-0"), (topic, 1, "kill-j-1")], "OPEN")
    ctx.idem_write(idem, [(topic, 0, val("kill-i", k)) for k in range(3)])
    t_kill = time.monotonic()
    ctx.broker.nodes[victim].kill()
    # the producers go on: librdkafka and the Java client find the new leader (and coordinator) themselves
    ctx.ck_more(t, tx, [(topic, 0, val("kill-t", 3)), (topic, 1, val("kill-t", 4))])
    ctx.java_more(j, jx, [(topic, 0, "kill-j-2")])
    ctx.idem_write(idem, [(topic, 0, val("kill-i", k)) for k in range(3, 6)])
    failover_s = time.monotonic() - t_kill
    after = ctx.partitions(topic)
    if after[0]["leader"] in (victim, -1):
        raise RuntimeError(f"payments-0 leader did not move off node {victim}: {after}")
    ctx.end_txn_tracked(tx, lambda: t.p.commit_transaction(60), "COMMIT", lambda: t.identity()[1])
    ctx.end_txn_tracked(jx, lambda: j.call("commit"), "COMMIT",
                        lambda: j.state["producer_epoch"] if j.state["producer_id"] == jx.producer_id else None)
    for r in range(6, 8):
        ctx.ck_txn(t, [(topic, 0, val("t", r)), (topic, 1, val("t", 100 + r))], "COMMIT")
        ctx.idem_write(idem, [(topic, r % 2, val("i", r))])
    if idem.identity() != idem_identity_before:
        raise RuntimeError(f"idempotent producer changed identity {idem_identity_before} -> {idem.identity()}")
    isr_while_down = ctx.partitions(topic)
    t_restart = time.monotonic()
    ctx.broker.start_node(victim)
    isr = ctx.wait_isr_full([topic] + _cluster_internal_topics(ctx), timeout=120)
    catch_up_s = time.monotonic() - t_restart
    ctx.ck_txn(t, [(topic, 0, val("t", 8)), (topic, 1, val("t", 108))], "COMMIT")
    ctx.java_txn(j, [(topic, 0, "j-9"), (topic, 1, "j-109")], "ABORT")
    ctx.java_txn(j, [(topic, 0, "j-10")], "COMMIT")
    ctx.idem_write(idem, [(topic, 1, val("i", 9))])
    ctx.record_end_offsets([(topic, 0), (topic, 1)])
    isr_final = ctx.wait_isr_full([topic] + _cluster_internal_topics(ctx))
    ctx.ending_text = (f"node {victim} SIGKILLed mid-scenario and restarted; clean shutdown (SIGTERM) of all 3 nodes "
                       "at once at the end, every replica in the ISR")
    return {
        "description": sc_leader_killed.__doc__,
        "steps": {"killed_node": victim, "killed_while_open": [tx.transactional_id, jx.transactional_id],
                  "coordinator_partitions": {x: tp("__transaction_state", coordinator_partition(x))
                                             for x in (tx.transactional_id, jx.transactional_id)},
                  "partitions_before_kill": {tp(topic, p): v for p, v in before.items()},
                  "transaction_state_before_kill": {tp("__transaction_state", p): v for p, v in txn_state_before.items()},
                  "partitions_after_failover": {tp(topic, p): v for p, v in after.items()},
                  "partitions_before_restart": {tp(topic, p): v for p, v in isr_while_down.items()},
                  "failover_writes_s": round(failover_s, 1), "restart_catch_up_s": round(catch_up_s, 1),
                  "isr_after_restart": isr, "isr_before_shutdown": isr_final,
                  "idempotent_identity": list(idem_identity_before)},
        "expect": {"anomalies": []},
    }


@scenario("compacted-hanging", PRE_VERIFICATION, overrides=dict(CLEANER_OVERRIDES))
def sc_compacted_hanging(ctx: Ctx) -> dict:
    """Kafka 3.5.2 (before transaction verification), one node. `kv` (2 partitions) has
    cleanup.policy=compact and is written by a librdkafka transactional producer (TV0) and an
    idempotent producer: keyed records, repeated keys, tombstones, commits and aborts. The log cleaner
    runs (two passes: aborted data and overwritten keys removed, then tombstones and the markers of
    emptied transactions; replaced segments kept as *.deleted). Then the KAFKA-12671 pattern on kv-0: a
    transaction is aborted and a produce for the same producer id/epoch lands after its ABORT marker.
    It opens a transaction no coordinator knows about; kv-0's LSO stays there, so the cleaner cannot
    clean past it while the idempotent producer keeps writing. The transactional producer keeps
    committing on kv-1, which the cleaner keeps compacting."""
    topic, parts = "kv", [0, 1]
    ctx.create_topic(topic, 2, 1024, **compacted_topic_config())
    rng = random.Random(47)
    p = ctx.ck("late-writer", **{"transactional.id": "kv-hang-txn"})
    idem = ctx.ck("idem", **{"enable.idempotence": True})
    p.p.init_transactions(30)
    ctx.rec.producer("late-writer", client="confluent-kafka", kind="transactional", transactional_id="kv-hang-txn")
    ctx.rec.producer("idem", client="confluent-kafka", kind="idempotent")
    for r in range(16):
        ctx.ck_txn(p, _ck_kv(_kv_round(ctx, rng, r, topic, parts, "a")), "ABORT" if r % 4 == 3 else "COMMIT")
        if r % 3 == 1:
            ctx.idem_write(idem, _ck_kv([(topic, rng.choice(parts), f"k{rng.randrange(6)}", f"i{r}") for _ in range(2)]))
    # Kafka 3.5.2 cleans a log again only when it is dirty: after the delete horizon of the markers and
    # tombstones of the first pass has passed, a small committed transaction (in a segment rolled by
    # segment.ms) makes the log dirty so that a later pass removes them
    t0 = time.monotonic()
    wait_compaction(ctx, topic, parts, [1], first_pass_done, "first cleaner pass")
    nudges = 0
    while True:
        state = compaction_state(ctx, topic, parts)
        if all(second_pass_done(state["broker-1"][tp(topic, q)]) for q in parts):
            s1 = state
            break
        if nudges >= 12:
            raise RuntimeError(f"no second cleaner pass after {nudges} nudges: {json.dumps(state, indent=1)}")
        time.sleep(DELETE_RETENTION_MS / 1000 + 0.7)
        ctx.ck_txn(p, _ck_kv([(topic, q, f"k{rng.randrange(6)}", f"n{nudges}") for q in parts]), "COMMIT")
        nudges += 1
        time.sleep(1.0)
    cleaned_s = time.monotonic() - t0
    aborted = ctx.ck_txn(p, _ck_kv([(topic, 0, "k1", "doomed-0"), (topic, 0, "k2", "doomed-1")]), "ABORT")
    with RawConnection(ctx.broker.bootstrap) as conn:
        late = _late_write(ctx, conn, p, "kv-hang-txn", topic, 0, p.sent_per_tp[tp(topic, 0)],
                           [b"late-0", b"late-1"], "late write after the ABORT marker of the previous transaction",
                           keys=[b"k1", b"k2"])
    for r in range(16, 24):
        ctx.ck_txn(p, _ck_kv(_kv_round(ctx, rng, r, topic, [1], "b")), "COMMIT")
        ctx.idem_write(idem, _ck_kv([(topic, 0, f"k{rng.randrange(6)}", f"i{r}")]))
    ctx.record_end_offsets([(topic, 0), (topic, 1)])
    lso0 = ctx.rec.end_offsets[tp(topic, 0)]["last_stable_offset"]
    if lso0 != late["first_offset"]:
        raise RuntimeError(f"kv-0 LSO {lso0} is not at the late write {late['first_offset']}")
    # kv-1 goes on being cleaned; wait for a checkpoint past phase 1's
    c1 = s1["broker-1"][tp(topic, 1)]["cleaner_checkpoint"]
    s2 = wait_compaction(ctx, topic, [1], [1], lambda st: (st["cleaner_checkpoint"] or 0) > c1, "kv-1 cleaned again")

    def verify() -> dict:
        final = compaction_state(ctx, topic, parts)
        for k, st_ in final["broker-1"].items():
            if not (st_["cleaner_checkpoint"] and st_["offset_holes"] and st_["deleted_files"]):
                raise RuntimeError(f"{k}: not compacted at capture ({st_})")
        if final["broker-1"][tp(topic, 0)]["cleaner_checkpoint"] > late["first_offset"]:
            raise RuntimeError("kv-0 cleaned past its last stable offset")
        return {"compaction_at_capture": final,
                "verified": "on the stopped log dir, before copying: cleaner-offset-checkpoint entries for kv-0 and "
                            "kv-1, offset holes, *.deleted files of replaced segments, tombstones and markers removed "
                            "by a second pass; kv-0's cleaner checkpoint is not past the hanging transaction"}

    ctx.after_stop.append(verify)
    return {
        "description": sc_compacted_hanging.__doc__,
        "steps": {"topic_config": compacted_topic_config(), "two_passes_wait_s": round(cleaned_s, 1),
                  "nudge_transactions": nudges,
                  "compaction_before_late_write": s1, "kv-1_cleaned_after_late_write": s2},
        "expect": {"anomalies": [{
            "type": "hanging-transaction", "topic": topic, "partition": 0,
            "producer_id": late["producer_id"], "producer_epoch": late["producer_epoch"],
            "transactional_id": "kv-hang-txn", "first_offset": late["first_offset"], "last_offset": late["last_offset"],
            "base_sequence": late["base_sequence"],
            "after_marker_offset": aborted.marker_offsets[tp(topic, 0)],
            "last_stable_offset": lso0,
            "why": "transactional data after its transaction's ABORT marker on a compacted partition; the "
                   "coordinator completed that transaction and later ones never include kv-0",
        }]},
    }


LEGACY_FLUSHES = (1, 5, 25, 3)  # records per produce request (one batch; one wrapper when compressed)
LEGACY_FORMATS = (("0.10.0", 1), ("0.9.0", 0))  # topic message.format.version -> the magic it writes
LEGACY_CODECS = ("none", "gzip", "snappy", "lz4")


@scenario("legacy-message-formats", PRE_VERIFICATION, zookeeper=True,
          overrides={"inter.broker.protocol.version": "2.8", "log.message.format.version": "2.8"})
def sc_legacy_message_formats(ctx: Ctx) -> dict:
    """A ZooKeeper-mode broker (3.5.2, `inter.broker.protocol.version` 2.8, the last below 3.0, so topic
    configs `message.format.version` still apply) keeps topics in message format 1 (`0.10.0`) and 0
    (`0.9.0`). Kafka's Java producer (3.5.2 jars, not idempotent: old formats have no producer ids)
    sends v2 batches compressed with gzip, snappy, lz4 or not at all; the broker converts each batch
    down to the topic's format on append: a compressed batch becomes one legacy *wrapper* message
    whose value holds the records as inner messages (format 1: relative inner offsets, the wrapper
    carrying the last absolute one; format 0: absolute inner offsets; lz4 in format 0 with the old
    broken frame-header checksum), an uncompressed one a message per record. One format-1 topic uses
    LogAppendTime (inner timestamps are the wrapper's). Per topic 34 records in 4 produce requests
    of 1, 5, 25 and 3 records, every other record keyed, some values null."""
    topics = []
    for fmt, magic in LEGACY_FORMATS:
        for codec in LEGACY_CODECS:
            topics.append((f"format{magic}-{codec}", fmt, magic, codec, "CreateTime"))
    topics.append(("format1-gzip-logappendtime", "0.10.0", 1, "gzip", "LogAppendTime"))
    for topic, fmt, _, _, ts_type in topics:
        ctx.create_topic(topic, 1, 2048, **{"message.format.version": fmt, "message.timestamp.type": ts_type})
    steps: dict[str, dict] = {}
    for codec in LEGACY_CODECS:
        # linger.ms of a minute: a batch goes out on flush() only, so each flush is one produce request
        p = ctx.java(f"java-{codec}", **{"compression.type": codec, "enable.idempotence": "false", "acks": "all",
                                        "linger.ms": 60000})
        ctx.rec.producer(f"java-{codec}", client=f"kafka-clients {ctx.version} (Java)", kind="plain",
                         compression=codec)
        for topic, fmt, magic, _, ts_type in (t for t in topics if t[3] == codec):
            flushes = []
            n = 0
            for size in LEGACY_FLUSHES:
                for _ in range(size):
                    value = "~null" if n % 6 == 5 else f"{topic}-{n}-" + "x" * (n % 7)  # null: keyed (odd n) only
                    if n % 2:
                        p.call("sendkv", topic, 0, f"key-{n % 5}", value)
                    else:
                        p.call("send", topic, 0, value)
                    n += 1
                recs = [(r["topic"], r["partition"], r["offset"]) for r in p.call("flush")["records"]]
                ctx.rec.write(f"java-{codec}", "plain", -1, -1, recs)
                flushes.append([o for _, _, o in recs])
            steps[tp(topic, 0)] = {"message_format_version": fmt, "magic": magic, "producer_compression": codec,
                                   "timestamp_type": ts_type, "produce_requests": flushes}
    tps = [(t[0], 0) for t in topics]
    ctx.record_end_offsets(tps)
    return {
        "description": sc_legacy_message_formats.__doc__,
        "steps": {"topics": steps, "why": "each produce request is one v2 batch, which the broker converts to one "
                                          "legacy wrapper (compressed) or one message per record (none); "
                                          "offsets from the producer's futures"},
        "expect": {"anomalies": []},
    }


@scenario("kafka-4.4", KAFKA_4_4, keep_preallocated_indexes=True)
def sc_kafka_4_4(ctx: Ctx) -> dict:
    """Kafka 4.4.0 (a single KRaft node, format defaults: transaction.version 2). Transactions over
    `orders` 0-2 by a librdkafka producer (TV1, zstd) and Kafka 4.4.0's Java producer (TV2, lz4: every
    commit/abort bumps the epoch), every 4th aborted, idempotent snappy writes and plain writes between
    them; two consume-transform-produce transactions with a transactional offset commit of group
    `orders-etl-44` (librdkafka, TV1, committed; Java, TV2, committed). Clean stop. 4.4.0 leaves the
    metadata log's active .index/.timeindex untrimmed at their preallocated 10 MiB (copied as they are).
    Nothing is left open."""
    from confluent_kafka import Consumer, TopicPartition

    ctx.create_topic("orders", 3, 1024)
    ctx.create_topic("events", 1, 1024)
    rng = random.Random(44)
    a = ctx.ck("txn-a", **{"transactional.id": "orders44-txn-a", "compression.type": "zstd"})
    j = ctx.java("txn-java", **{"transactional.id": "orders44-txn-java", "compression.type": "lz4"})
    idem = ctx.ck("idem", **{"enable.idempotence": True, "compression.type": "snappy"})
    plain = ctx.ck("plain", **{"enable.idempotence": False, "acks": "1"})
    a.p.init_transactions(30)
    st = j.call("init")
    if not st["tv2"]:
        raise RuntimeError("Kafka 4.4.0's Java client did not enable transaction version 2")
    ctx.rec.producer("txn-a", client="confluent-kafka", kind="transactional", transactional_id="orders44-txn-a",
                     compression="zstd")
    ctx.rec.producer("txn-java", client="kafka-clients (Java)", kind="transactional",
                     transactional_id="orders44-txn-java", compression="lz4", tv2=st["tv2"])
    ctx.rec.producer("idem", client="confluent-kafka", kind="idempotent", compression="snappy")
    ctx.rec.producer("plain", client="confluent-kafka", kind="plain", compression="none")
    ctx.idem_write(plain, [("events", 0, val("event", i)) for i in range(8)], kind="plain")

    n = 0
    for r in range(12):
        outcome = "ABORT" if r % 4 == 3 else "COMMIT"
        writes = []
        for part in rng.sample(range(3), rng.choice([1, 2, 3])):
            for _ in range(rng.randint(1, 3)):
                writes.append(("orders", part, val(f"r{r}", n)))
                n += 1
        if r % 2 == 0:
            ctx.ck_txn(a, writes, outcome)
        else:
            ctx.java_txn(j, [(t, p, v.decode()) for t, p, v in writes], outcome)
        if r % 3 == 0:
            ctx.idem_write(idem, [("orders", rng.randrange(3), val("idem", r * 10 + k)) for k in range(2)])

    # consume-transform-produce (TV1, librdkafka): offsets of `events` committed in the transaction
    group = "orders-etl-44"
    otp = ("__consumer_offsets", coordinator_partition(group))
    consumer = Consumer({"bootstrap.servers": ctx.broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "logger": ctx.client_log})
    consumer.assign([TopicPartition("events", 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 8 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m)
    if len(got) < 8:
        raise RuntimeError(f"consumed {len(got)} of 8 events")
    txn = ctx.ck_txn(a, [("orders", 0, b"etl-" + m.value()) for m in got[:4]], "COMMIT",
                     offsets_from=(consumer, group, [TopicPartition("events", 0, got[3].offset() + 1)]))
    txn.marker_offsets[tp(*otp)] = ctx.settle([otp])[tp(*otp)] - 1
    consumer.close()
    # the same group's next offsets by the Java producer (TV2: TxnOffsetCommit v5, marker epoch + 1)
    st = j.call("begin")
    jtxn = Txn(j.transactional_id, f"kafka-clients {ctx.version} (Java)", st["producer_id"], st["producer_epoch"], 2)
    for m in got[4:]:
        j.call("send", "orders", 1, "etl-" + m.value().decode())
    for r in j.call("flush")["records"]:
        jtxn.offsets.setdefault(tp(r["topic"], r["partition"]), []).append(r["offset"])
    j.call("sendoffsets", group, "events", 0, got[7].offset() + 1)
    jtxn.offset_commits = [{"group_id": group, "topic": "events", "partition": 0, "committed_offset": got[7].offset() + 1,
                            "offsets_partition": tp(*otp)}]
    ctx.rec.txns.append(jtxn)
    st = j.call("commit")
    jtxn.outcome, jtxn.marker_epoch = "COMMIT", st["producer_epoch"]
    ctx._settle_markers(jtxn)
    jtxn.marker_offsets[tp(*otp)] = ctx.settle([otp])[tp(*otp)] - 1

    ctx.record_end_offsets([("orders", i) for i in range(3)] + [("events", 0), otp])

    def metadata_indexes() -> dict:
        """The metadata log's index files as the clean stop left them (sizes, bytes before the zeros)."""
        md = ctx.broker.metadata_log_dir / "__cluster_metadata-0"
        files = {}
        for f in sorted(md.glob("*index")):
            data = f.read_bytes()
            files[f.name] = {"size": len(data), "non_zero_prefix_bytes": len(data.rstrip(b"\0"))}
        return {"metadata_log_indexes_at_stop": files}

    ctx.after_stop.append(metadata_indexes)
    return {"description": sc_kafka_4_4.__doc__, "expect": {"anomalies": []}}


# --------------------------------------------------------------------------------------------------
# Tiered storage (KIP-405)
# --------------------------------------------------------------------------------------------------
#: Kafka's own file-system RemoteStorageManager, LocalTieredStorage, ships only in the kafka-storage
#: *test* jar (Maven classifier ``test``; published for 4.3.1, not for 4.4.0). It is handed to the
#: broker through ``remote.log.storage.manager.class.path`` (RemoteLogManager loads the RSM with a
#: child-first class loader over that path), so the broker classpath of fetch.sh stays as it is.
TIERED_JAR = ROOT / "build" / "kafka" / NEWEST / "test-libs" / f"kafka-storage-{NEWEST}-test.jar"
TIERED_STORE = WORK / "tiered-storage-remote"
TIERED_STORE_NAME = "remote-store"


def fetch_tiered_storage_jar() -> None:
    """``kafka-storage-<NEWEST>-test.jar`` from Maven Central (cached in ~/.m2) into build/kafka/<v>/test-libs."""
    if TIERED_JAR.is_file():
        return
    import subprocess

    TIERED_JAR.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mvn", "-q", "-B", "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy",
                    f"-Dartifact=org.apache.kafka:kafka-storage:{NEWEST}:jar:test",
                    f"-DoutputDirectory={TIERED_JAR.parent}"], check=True, timeout=900)


def _clear_tiered_store() -> None:
    fetch_tiered_storage_jar()
    if TIERED_STORE.exists():
        shutil.rmtree(TIERED_STORE)


TIERED_OVERRIDES = {
    "remote.log.storage.system.enable": "true",
    "remote.log.storage.manager.class.name": "org.apache.kafka.server.log.remote.storage.LocalTieredStorage",
    "remote.log.storage.manager.class.path": str(TIERED_JAR),
    "rsm.config.dir": str(TIERED_STORE),  # LocalTieredStorage writes <dir>/kafka-tiered-storage/
    "remote.log.metadata.manager.listener.name": "PLAINTEXT",  # TopicBasedRemoteLogMetadataManager's clients
    "rlmm.config.remote.log.metadata.topic.num.partitions": 1,
    "rlmm.config.remote.log.metadata.topic.replication.factor": 1,
    "remote.log.manager.task.interval.ms": 500,  # copy / expire tasks (default 30 s)
    "log.retention.check.interval.ms": 500,  # local retention (local.retention.ms) checks
    "log.initial.task.delay.ms": 500,
    "log.segment.delete.delay.ms": 0,
    # librdkafka speaks TV1; without verification (KIP-890 part 1) the broker appends a late
    # transactional produce, as 3.5.2 did (3.5.2 has no usable tiered storage)
    "transaction.partition.verification.enable": "false",
}


def _tiered_state(ctx: Ctx, key: str) -> dict:
    """Local segment bases of partition ``key`` and the start offsets of its segments in the
    remote store (LocalTieredStorage: ``<topic>-<partition>-<topic id>/<offset>-<segment id>.log``)."""
    local = sorted(int(f.name.split(".")[0]) for f in (ctx.broker.log_dir / key).glob("*.log"))
    root = TIERED_STORE / "kafka-tiered-storage"
    remote = sorted(int(f.name.split("-")[0]) for d in root.glob(f"{key}-*") for f in d.glob("*.log")) if root.exists() else []
    return {"local_segment_bases": local, "remote_segment_bases": remote}


def _wait_tiered(ctx: Ctx, keys: list[str], cond: Callable[[dict], bool], timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = {k: _tiered_state(ctx, k) for k in keys}
        if all(cond(v) for v in st.values()):
            return st
        if time.monotonic() > deadline:
            raise RuntimeError(f"tiering did not happen: {st}")
        time.sleep(0.5)


@scenario("tiered-storage", NEWEST, overrides=TIERED_OVERRIDES, prepare=_clear_tiered_store)
def sc_tiered_storage(ctx: Ctx) -> dict:
    """Tiered storage (KIP-405) on Kafka 4.3.1 with Kafka's own LocalTieredStorage as the remote
    storage manager and the TopicBasedRemoteLogMetadataManager (`__remote_log_metadata`, one
    partition). `tiered` (2 partitions, `remote.storage.enable`, 1 KiB segments, `local.retention.ms`
    1000): a librdkafka transactional producer (TV1) commits and aborts transactions over both
    partitions while an idempotent producer writes between them; the RemoteLogManager copies every
    rolled segment below the last stable offset to the remote store (segment, indexes, the producer
    snapshot and the leader-epoch checkpoint) and local retention deletes the copied segments, so
    the first segments of both partitions exist only remotely and both producers' earlier batches
    are remote. Then KAFKA-12671 on `tiered-0` (partition verification disabled): a raw
    transactional produce for the producer id/epoch after its transaction's ABORT marker. It opens
    a transaction no marker will close; the LSO of tiered-0 stays at it, so tiering of tiered-0
    stops below it (RemoteLogManager copies only segments that end below the LSO: an open
    transaction's first batch is never only remote). The idempotent producer keeps writing both
    partitions, the transactional producer keeps committing on tiered-1, which keeps being tiered.
    `remote-store/` is the LocalTieredStorage directory, copied unmodified."""
    tiered = {"remote.storage.enable": "true", "local.retention.ms": "1000"}
    ctx.create_topic("tiered", 2, 1024, **tiered)
    keys = ["tiered-0", "tiered-1"]
    t = ctx.ck("tiered-writer", **{"transactional.id": "tiered-txn"})
    t.p.init_transactions(30)
    ctx.rec.producer("tiered-writer", client="confluent-kafka", kind="transactional", transactional_id="tiered-txn")
    idem = ctx.ck("tiered-idem", **{"enable.idempotence": True, "linger.ms": 0})
    ctx.rec.producer("tiered-idem", client="confluent-kafka", kind="idempotent")
    for r in range(16):
        ctx.ck_txn(t, [("tiered", 0, val("t", 2 * r)), ("tiered", 1, val("t", 2 * r + 1))],
                   "ABORT" if r % 5 == 3 else "COMMIT")
        ctx.idem_write(idem, [("tiered", 0, val("i", 2 * r)), ("tiered", 1, val("i", 2 * r + 1))])
    before_hang = _wait_tiered(ctx, keys, lambda s: len(s["remote_segment_bases"]) >= 2
                               and s["local_segment_bases"] and s["local_segment_bases"][0] > 0)
    aborted = ctx.ck_txn(t, [("tiered", 0, val("x", 0)), ("tiered", 0, val("x", 1))], "ABORT")
    with RawConnection(ctx.broker.bootstrap) as conn:
        late = _late_write(ctx, conn, t, "tiered-txn", "tiered", 0, t.sent_per_tp["tiered-0"],
                           [b"late-0", b"late-1"], "late write after the ABORT marker of the previous transaction")
    for r in range(12):
        ctx.ck_txn(t, [("tiered", 1, val("after", r))], "COMMIT")
        ctx.idem_write(idem, [("tiered", 0, val("j", 2 * r)), ("tiered", 1, val("j", 2 * r + 1))])
    n1 = len(before_hang["tiered-1"]["remote_segment_bases"])
    _wait_tiered(ctx, ["tiered-1"], lambda s: len(s["remote_segment_bases"]) > n1)
    time.sleep(3)  # a few more copy / retention rounds
    final = {k: _tiered_state(ctx, k) for k in keys}
    if final["tiered-0"]["remote_segment_bases"] and max(final["tiered-0"]["remote_segment_bases"]) > late["first_offset"]:
        raise RuntimeError(f"a segment past the open transaction was tiered: {final}")
    tps = [("tiered", 0), ("tiered", 1)]
    ctx.record_end_offsets(tps)
    ctx.extra_dirs[TIERED_STORE_NAME] = TIERED_STORE
    return {
        "description": sc_tiered_storage.__doc__,
        "steps": {"segments_before_late_write": before_hang, "segments_at_shutdown": final,
                  "remote_store": f"{TIERED_STORE_NAME}/ (LocalTieredStorage rsm.config.dir; the broker property "
                                  "points at the capture's work directory)"},
        "expect": {"anomalies": [{
            "type": "hanging-transaction", "topic": "tiered", "partition": 0,
            "producer_id": late["producer_id"], "producer_epoch": late["producer_epoch"],
            "transactional_id": "tiered-txn", "first_offset": late["first_offset"], "last_offset": late["last_offset"],
            "base_sequence": late["base_sequence"],
            "after_marker_offset": aborted.marker_offsets["tiered-0"],
            "last_stable_offset": ctx.rec.end_offsets["tiered-0"]["last_stable_offset"],
            "why": "transactional data after its transaction's ABORT marker; the coordinator completed that "
                   "transaction and later ones never include tiered-0. Found with or without the remote "
                   "store: the open transaction stops tiering, so its first batch is in the local log",
        }]},
    }


# --------------------------------------------------------------------------------------------------
# Mutations (derived from real captures; CRC-32C recomputed)
# --------------------------------------------------------------------------------------------------
def _crc32c(data: bytes) -> int:
    from kafka.record.util import calc_crc32c

    return calc_crc32c(data)


def _batches(buf: bytes):
    """(position, size, base_offset) of each v2 batch in a segment (framing only)."""
    pos = 0
    while pos + 12 <= len(buf):
        base, length = struct.unpack_from(">qi", buf, pos)
        if length <= 0 or pos + 12 + length > len(buf):
            break
        yield pos, 12 + length, base
        pos += 12 + length


def _recrc(buf: bytearray, pos: int, size: int) -> tuple[int, int]:
    old = struct.unpack_from(">I", buf, pos + 17)[0]
    new = _crc32c(bytes(buf[pos + 21: pos + size]))
    struct.pack_into(">I", buf, pos + 17, new)
    return old, new


def _copy_base(base: str, name: str, parts: list[str]) -> Path:
    src = SAMPLE_LOGS / base / "broker-1"
    if not src.is_dir():
        raise RuntimeError(f"mutation {name} needs the capture {base}: run --only {base} first")
    dst = SAMPLE_LOGS / name / "broker-1"
    if dst.parent.exists():
        shutil.rmtree(dst.parent)
    dst.mkdir(parents=True)
    shutil.copy2(src / "meta.properties", dst / "meta.properties")
    for p in parts:
        shutil.copytree(src / p, dst / p)
    return dst


def mutate_out_of_order(name: str) -> dict:
    """From `unknown-producer`: in ledger-0, producer Q's retained batches from its second one on get
    base sequences 3 higher than Q sent, so Q's sequence jumps from s to s+4 between two consecutive
    batches (a gap the broker would have refused with OUT_OF_ORDER_SEQUENCE_NUMBER) and then runs on
    consecutively. The producer snapshots are left out: they hold Q's real last sequence."""
    base = "unknown-producer"
    shift = 3
    exp = json.loads((SAMPLE_LOGS / base / "expected.json").read_text())
    low = exp["steps"]["log_start_offset_after_delete"]
    # Q's batches: one record each (flushed one by one), sequences as recorded
    retained = [w for w in exp["writes"] if w["producer"] == "Q" and w["record_offsets"][0] >= low]
    prev, targets = retained[0], {w["record_offsets"][0]: w for w in retained[1:]}
    dst = _copy_base(base, name, ["ledger-0"])
    for snap in (dst / "ledger-0").glob("*.snapshot"):
        snap.unlink()  # our copy, not the capture
    changes = []
    for seg in sorted((dst / "ledger-0").glob("*.log")):
        buf = bytearray(seg.read_bytes())
        for pos, size, base_off in _batches(buf):
            w = targets.get(base_off)
            if w is None:
                continue
            pid = struct.unpack_from(">q", buf, pos + 43)[0]
            epoch = struct.unpack_from(">h", buf, pos + 51)[0]
            seq = struct.unpack_from(">i", buf, pos + 53)[0]
            if pid != w["producer_id"] or seq != w["first_sequence"]:
                raise RuntimeError(f"batch at {base_off}: pid {pid} seq {seq} not as recorded {w}")
            struct.pack_into(">i", buf, pos + 53, seq + shift)
            old, new = _recrc(buf, pos, size)
            changes.append({"file": f"broker-1/ledger-0/{seg.name}", "batch_position": pos, "batch_base_offset": base_off,
                            "base_sequence": [seq, seq + shift], "crc": [old, new]})
        seg.write_bytes(bytes(buf))
    if len(changes) != len(targets):
        raise RuntimeError(f"changed {len(changes)} of {len(targets)} batches")
    first = min(changes, key=lambda c: c["batch_base_offset"])
    return {
        "description": mutate_out_of_order.__doc__,
        "derived_from": base,
        "mutation": {
            "change": f"baseSequence (int32 at batch bytes 53-56) += {shift} in every batch of producer "
                      f"{prev['producer_id']} from offset {first['batch_base_offset']} on",
            "crc": "each changed batch's CRC-32C (batch bytes 17-20) recomputed over batch bytes 21..end",
            "batches": changes,
            "other_files": "meta.properties and ledger-0 copied from ../unknown-producer/broker-1; the producer "
                           "snapshots (*.snapshot) of ledger-0 are left out because they hold the real sequences",
        },
        "expect": {"anomalies": [{
            "type": "out-of-order-sequence", "topic": "ledger", "partition": 0, "producer_id": prev["producer_id"],
            "producer_epoch": prev["producer_epoch"], "first_offset": first["batch_base_offset"],
            "base_sequence": first["base_sequence"][1], "expected_sequence": prev["first_sequence"] + 1,
            "previous_batch_offset": prev["record_offsets"][0],
        }] + [a for a in exp["expect"]["anomalies"] if a["type"] == "unknown-producer"]},
    }


def mutate_overlapping_blocks(name: str) -> dict:
    """From `many-producers`: the second ProducerIdsRecord in the metadata log gets a nextProducerId
    500 lower, so its block overlaps the first block by 500 ids (what KIP-730 must never allow, and
    what a ZooKeeper-to-KRaft migration bug could produce)."""
    from kafka.record.default_records import DefaultRecordBatch

    base = "many-producers"
    dst = _copy_base(base, name, ["__cluster_metadata-0"])
    found = []
    for seg in sorted((dst / "__cluster_metadata-0").glob("*.log")):
        buf = bytearray(seg.read_bytes())
        for pos, size, base_off in _batches(buf):
            batch = DefaultRecordBatch(bytes(buf[pos: pos + size]))
            if batch.is_control_batch:
                continue
            for rec in batch:
                v = rec.value
                # metadata record value: frame version 1, api key 15 (ProducerIdsRecord), version,
                # brokerId int32, brokerEpoch int64, nextProducerId int64, tagged fields
                if v and v[0] == 1 and v[1] == 15:
                    found.append((seg, pos, size, base_off, rec.offset, bytes(v)))
    if len(found) < 2:
        raise RuntimeError(f"need two ProducerIdsRecords, found {len(found)}")
    first, second = found[0], found[1]
    seg, pos, size, base_off, rec_offset, value = second
    buf = bytearray(seg.read_bytes())
    at = bytes(buf[pos: pos + size]).find(value)
    if at < 0 or bytes(buf[pos: pos + size]).count(value) != 1:
        raise RuntimeError("ProducerIdsRecord value not unique in its batch")
    npid_at = pos + at + 3 + 4 + 8
    old_next = struct.unpack_from(">q", buf, npid_at)[0]
    first_next = struct.unpack_from(">q", first[5], 3 + 4 + 8)[0]
    new_next = old_next - 500
    struct.pack_into(">q", buf, npid_at, new_next)
    old, new = _recrc(buf, pos, size)
    seg.write_bytes(bytes(buf))
    return {
        "description": mutate_overlapping_blocks.__doc__,
        "derived_from": base,
        "mutation": {
            "file": f"broker-1/__cluster_metadata-0/{seg.name}", "batch_position": pos, "record_offset": rec_offset,
            "change": f"ProducerIdsRecord.nextProducerId (int64 at file bytes {npid_at}-{npid_at + 7}) {old_next} -> {new_next}",
            "crc": f"batch CRC-32C (bytes {pos + 17}-{pos + 20}) recomputed: {old} -> {new}",
            "other_files": "copied unchanged from ../many-producers/broker-1 (meta.properties and __cluster_metadata-0); "
                           "KRaft snapshots (*.checkpoint) there still hold the unmutated latest block",
        },
        "expect": {"anomalies": [{
            "type": "overlapping-producer-id-blocks", "topic": "__cluster_metadata", "partition": 0,
            "first_block": [first_next - 1000, first_next - 1], "first_record_offset": first[4],
            "second_block": [new_next - 1000, new_next - 1], "second_record_offset": rec_offset,
            "overlap": [new_next - 1000, first_next - 1],
        }]},
    }


MUTATIONS: dict[str, tuple[str, Callable[[str], dict]]] = {
    "mutated-out-of-order-sequence": ("unknown-producer", mutate_out_of_order),
    "mutated-overlapping-pid-blocks": ("many-producers", mutate_overlapping_blocks),
}


# --------------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------------
def _dir_size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def capture(sc: Scenario) -> dict:
    t0 = time.monotonic()
    if sc.prepare is not None:
        sc.prepare()
    ctx = Ctx(sc.name, sc.version, sc.overrides, sc.features, sc.brokers, sc.node_overrides, sc.zookeeper)
    try:
        ctx.start()
        start_s = ctx.broker.timings.get("start_s")
        result = sc.run(ctx)
        if ctx.ending == "kill":
            ctx.broker.kill()
            ctx.close_clients()
        else:
            ctx.close_clients()
            ctx.broker.stop()
        for check in ctx.after_stop:  # verifications of the log dirs as they will be copied
            result.setdefault("capture_checks", {}).update(check())
    except BaseException:
        ctx.broker.kill()
        log.error("broker output tail:\n%s", ctx.broker.log_tail(40))
        raise
    dest = SAMPLE_LOGS / sc.name
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    excluded: list[dict] = []
    cluster = isinstance(ctx.broker, KafkaCluster)
    log_dirs = ctx.broker.log_dirs() if cluster else {1: ctx.broker.log_dir}
    current = {"root": ctx.broker.log_dir if not cluster else None, "prefix": ""}

    def ignore(dirpath: str, names: list[str]) -> list[str]:
        """Leave out preallocated (>= 1 MiB) index files of a killed broker, recording them."""
        out = []
        for n in names:
            f = Path(dirpath) / n
            if (not sc.keep_preallocated_indexes and n.endswith((".index", ".timeindex")) and f.is_file()
                    and f.stat().st_size >= 1 << 20):
                data = f.read_bytes()
                used = len(data.rstrip(b"\0"))
                excluded.append({
                    "path": current["prefix"] + str(f.relative_to(current["root"])), "size": len(data),
                    "non_zero_prefix_bytes": used,
                    "why": "preallocated index of the active segment, left at its full preallocated size by "
                           + ("the SIGKILL (a clean shutdown trims it)" if ctx.ending == "kill" else
                              "the clean stop (Kafka 4.4.0 trims only partition logs' indexes at shutdown, "
                              "through UnifiedLog.prepareActiveSegmentForClose; not the metadata log's)")
                           + "; the metadata log ignores "
                           "log.index.size.max.bytes, so it is 10 MiB, all zeros after the prefix. Not copied "
                           "to keep sample_logs small; Kafka's files are otherwise copied unmodified."})
                out.append(n)
        return out

    for node_id, log_dir in log_dirs.items():
        current["root"], current["prefix"] = log_dir, (f"broker-{node_id}/" if cluster else "")
        shutil.copytree(log_dir, dest / f"broker-{node_id}", symlinks=True, ignore=ignore)
    for name, src in ctx.extra_dirs.items():  # e.g. a tiered-storage scenario's remote store
        shutil.copytree(src, dest / name, symlinks=True)
    rec = ctx.rec
    props = ctx.broker.server_properties()
    props.update({k: str(v) for k, v in (ctx.broker.common_overrides if cluster else sc.overrides).items()})
    for k in ("listeners", "advertised.listeners", "controller.quorum.voters", "log.dirs", "zookeeper.connect"):
        props.pop(k, None)
    if cluster:
        broker_info = {"ending": ctx.ending_text or ("SIGKILL" if ctx.ending == "kill" else "clean shutdown (SIGTERM)"),
                       "nodes": sorted(log_dirs), "topology": f"{ctx.brokers} KRaft nodes, each "
                       "process.roles=broker,controller, static quorum of all of them (controller.quorum.voters)",
                       "cluster_id": ctx.broker.cluster_id, "features": sc.features or "format defaults",
                       "server_properties": props,
                       "node_overrides": {str(k): {kk: str(vv) for kk, vv in v.items()}
                                          for k, v in sorted(ctx.broker.node_overrides.items())},
                       "small_segments_via": "topic config " + next(iter(ctx.segment_config(0)))}
    else:
        broker_info = {"ending": "SIGKILL" if ctx.ending == "kill" else "clean shutdown (SIGTERM)",
                       "node_id": 1, "cluster_id": ctx.broker.cluster_id, "features": sc.features or "format defaults",
                       "server_properties": props,
                       "small_segments_via": "topic config " + next(iter(ctx.segment_config(0)))}
        if sc.zookeeper:
            zk = sorted(p.name for p in libs_dir(sc.version).glob("zookeeper-[0-9]*.jar"))
            broker_info.update(node_id=None, broker_id=1, features=None,
                               mode=f"ZooKeeper mode: one standalone ZooKeeper ({', '.join(zk)}, from the broker's "
                                    "jars); cluster id put into /cluster/id before the broker's first start")
    expected = {
        "scenario": sc.name,
        "kafka_version": sc.version,
        "description": " ".join(result.pop("description").split()),
        "generated_by": f"{GENERATED_BY} --only {sc.name}",
        "broker": broker_info,
        "clients": {"confluent-kafka": _ck_version(), "kafka-python (protocol layer)": _kp_version(),
                    "java": f"kafka-clients {sc.version}" if ctx.used_java else None},
        "mutation": None,
        "excluded_files": excluded,
        "expect": result.pop("expect"),
    }
    counts = rec.counts()
    for a in expected["expect"]["anomalies"]:
        if a["type"] in ("hanging-transaction", "hanging-transactional-offset-commit"):  # opened by a raw request
            counts.setdefault(tp(a["topic"], a["partition"]), {"committed": 0, "aborted": 0, "open": 0})["open"] += 1
    expected["expect"]["counts"] = dict(sorted(counts.items()))
    expected["expect"]["end_offsets_before_shutdown"] = dict(sorted(rec.end_offsets.items()))
    expected.update(result)
    if rec.keyed:
        expected["keyed_records"] = {
            "format": "[offset, key, tombstone (null value), writer] per record written with a key, from the "
                      "delivery reports / produce responses (before compaction)",
            **{k: v for k, v in sorted(rec.keyed.items())}}
    expected["producers"] = list(rec.producers.values())
    expected["transactions"] = [t.as_json() for t in rec.txns]
    expected["writes"] = rec.writes
    expected["raw_requests"] = rec.raw
    expected["size_bytes"] = sum(_dir_size(dest / f"broker-{i}") for i in log_dirs)
    (dest / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    took = time.monotonic() - t0
    log.info("%s (Kafka %s): start %.1fs, total %.1fs, %d KB", sc.name, sc.version, start_s or -1, took,
             expected["size_bytes"] // 1024)
    return {"name": sc.name, "seconds": took, "start_s": start_s, "size": expected["size_bytes"]}


def run_mutation(name: str) -> dict:
    base, fn = MUTATIONS[name]
    t0 = time.monotonic()
    result = fn(name)
    # a mutated copy must not pass for the cluster it was copied from (the auditor compares
    # everything within a cluster id): it gets the cluster id derived from its own name
    meta = SAMPLE_LOGS / name / "broker-1" / "meta.properties"
    cid = cluster_id_for(name)
    meta.write_text("".join(f"cluster.id={cid}\n" if line.startswith("cluster.id=") else line
                            for line in meta.read_text().splitlines(keepends=True)))
    result["mutation"]["meta_properties"] = (f"cluster.id set to {cid} (derived from the scenario name) so the copy "
                                             "is a cluster of its own, not a second dump of its source")
    bexp = json.loads((SAMPLE_LOGS / base / "expected.json").read_text())
    expected = {
        "scenario": name,
        "kafka_version": bexp["kafka_version"],
        "description": " ".join(result.pop("description").split()),
        "generated_by": f"{GENERATED_BY} --only {name} (after --only {base})",
        "mutation": result.pop("mutation"),
        "expect": result.pop("expect"),
    }
    expected.update(result)
    expected["size_bytes"] = _dir_size(SAMPLE_LOGS / name / "broker-1")
    (SAMPLE_LOGS / name / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    log.info("%s (mutation of %s): %d KB", name, base, expected["size_bytes"] // 1024)
    return {"name": name, "seconds": time.monotonic() - t0, "size": expected["size_bytes"]}


def _kp_version() -> str:
    import kafka

    return kafka.__version__


def main(argv: list[str] | None = None) -> int:
    global SAMPLE_LOGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="scenario name (repeatable)")
    ap.add_argument("--version", help="run the chosen scenarios against this Kafka version instead of their pinned one")
    ap.add_argument("--out", type=Path, default=SAMPLE_LOGS,
                    help="where <scenario>/ dirs go (default sample_logs/; use another dir with --version)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    SAMPLE_LOGS = args.out.absolute()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    names = list(SCENARIOS) + list(MUTATIONS)
    if args.list:
        for n in names:
            sc = SCENARIOS.get(n)
            print(f"{n:34s} {sc.version if sc else 'mutation of ' + MUTATIONS[n][0]}")
        return 0
    chosen = args.only or names
    unknown = [n for n in chosen if n not in names]
    if unknown:
        ap.error(f"unknown scenario(s): {unknown}; see --list")
    t0 = time.monotonic()
    summary = []
    for n in chosen:
        if n in SCENARIOS:
            sc = SCENARIOS[n]
            if args.version:
                sc = dataclasses.replace(sc, version=args.version)
            summary.append(capture(sc))
        else:
            summary.append(run_mutation(n))
    for s in summary:
        print(f"{s['name']:34s} {s['size'] / 1024:8.1f} KB  {s['seconds']:6.1f} s")
    print(f"total {time.monotonic() - t0:.1f} s, {sum(s['size'] for s in summary) / 1024:.1f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
