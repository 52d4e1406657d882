"""One scenario run (:class:`Ctx`): a fresh broker or cluster, an admin client, the scenario's
clients, and the transaction helpers that keep the bookkeeping while they drive the clients."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Callable

from scripts.capture.bookkeeping import Recorder, Txn, coordinator_partition, tp
from scripts.capture.clients import CkProducer, ck_version
from scripts.capture.paths import WORK
from scripts.kafka.harness import JavaProducer, KafkaBroker, KafkaCluster, cluster_id_for


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
        txn = Txn(p.conf["transactional.id"], "confluent-kafka " + ck_version(), pid, epoch, self.tv_ck())
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
            self.settle_markers(txn)
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
            self.settle_markers(txn)
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

    def settle_markers(self, txn: Txn) -> None:
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
