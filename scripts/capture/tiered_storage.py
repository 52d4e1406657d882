"""Tiered storage (KIP-405) with Kafka's own LocalTieredStorage and a hanging transaction that stops
tiering."""

from __future__ import annotations

import shutil
import time
from typing import Callable

from scripts.capture.context import Ctx
from scripts.capture.paths import ROOT, WORK
from scripts.capture.raw import late_write
from scripts.capture.registry import scenario
from scripts.capture.workloads import val
from scripts.kafka.harness import NEWEST, RawConnection

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
    """Before the broker starts: the RSM jar in place, the remote store of an earlier run gone."""
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
    """Poll :func:`_tiered_state` until ``cond`` holds for every partition of ``keys``."""
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
        late = late_write(ctx, conn, t, "tiered-txn", "tiered", 0, t.sent_per_tp["tiered-0"],
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


#: the replicated scenario's own remote store (shared by its three nodes, as a real RSM's bucket is)
REPLICATED_STORE = WORK / "tiered-storage-replicated-remote"


def _clear_replicated_store() -> None:
    """Before the nodes start: the RSM jar in place, the remote store of an earlier run gone."""
    fetch_tiered_storage_jar()
    if REPLICATED_STORE.exists():
        shutil.rmtree(REPLICATED_STORE)


REPLICATED_OVERRIDES = {
    **TIERED_OVERRIDES,
    "rsm.config.dir": str(REPLICATED_STORE),
    "rlmm.config.remote.log.metadata.topic.replication.factor": 3,
    # a stopped node is fenced (and its leaderships moved) after 4 s instead of 9 s
    "broker.session.timeout.ms": 4000,
    "broker.heartbeat.interval.ms": 500,
}


def _replicated_state(ctx: Ctx, key: str) -> dict:
    """Every node's local segment bases of partition ``key`` and the remote segments' start offsets."""
    local = {n: sorted(int(f.name.split(".")[0]) for f in (d / key).glob("*.log")) for n, d in ctx.log_dirs().items()}
    root = REPLICATED_STORE / "kafka-tiered-storage"
    remote = sorted(int(f.name.split("-")[0]) for d in root.glob(f"{key}-*") for f in d.glob("*.log")) if root.exists() else []
    return {"local_segment_bases": local, "remote_segment_bases": remote}


def _wait_replicated(ctx: Ctx, key: str, cond: Callable[[dict], bool], timeout: float = 120.0) -> dict:
    """Poll :func:`_replicated_state` until ``cond`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        st = _replicated_state(ctx, key)
        if cond(st):
            return st
        if time.monotonic() > deadline:
            raise RuntimeError(f"tiering did not happen: {st}")
        time.sleep(0.5)


def _all_local_past(n_remote: int) -> Callable[[dict], bool]:
    """At least ``n_remote`` remote segments and every replica's first local segment above offset 0
    (local retention deleted what was copied, on the leader and on the followers)."""
    return lambda s: len(s["remote_segment_bases"]) >= n_remote and all(
        b and b[0] > 0 for b in s["local_segment_bases"].values())


@scenario("tiered-storage-replicated", NEWEST, brokers=3, overrides=REPLICATED_OVERRIDES, prepare=_clear_replicated_store)
def sc_tiered_storage_replicated(ctx: Ctx) -> dict:
    """Tiered storage (KIP-405) on three KRaft nodes (Kafka 4.3.1, LocalTieredStorage as the remote
    storage manager, one store shared by the nodes, `__remote_log_metadata` with replication factor
    3). `tiered` (1 partition, replication factor 3, `remote.storage.enable`, 1 KiB segments,
    `local.retention.ms` 1000): a librdkafka transactional producer (TV1) commits and aborts
    transactions while an idempotent producer (acks=all) writes between them. The leader's
    RemoteLogManager copies rolled segments below the last stable offset to the store; every replica
    (leader and followers) deletes its local copies once they are remote, so the first segments
    exist only in the store. Then the leader is stopped cleanly: another replica becomes leader in a
    new leader epoch and goes on tiering; the stopped node is started again and catches up; a few more
    transactions stay local (active segment); every replica is in the ISR at the clean shutdown of the
    three nodes. Nothing is left open.
    `remote-store/` is the LocalTieredStorage directory, copied unmodified."""
    key = "tiered-0"
    ctx.create_topic("tiered", 1, 1024, **{"remote.storage.enable": "true", "local.retention.ms": "1000"})
    placement = ctx.partitions("tiered")
    t = ctx.ck("tiered-writer", **{"transactional.id": "tiered-rf3-txn"})
    t.p.init_transactions(30)
    ctx.rec.producer("tiered-writer", client="confluent-kafka", kind="transactional", transactional_id="tiered-rf3-txn")
    idem = ctx.ck("tiered-idem", **{"enable.idempotence": True, "linger.ms": 0})
    ctx.rec.producer("tiered-idem", client="confluent-kafka", kind="idempotent", acks="all")

    def rounds(tag: str, n: int) -> None:
        for r in range(n):
            ctx.ck_txn(t, [("tiered", 0, val(tag, 2 * r)), ("tiered", 0, val(tag, 2 * r + 1))],
                       "ABORT" if r % 4 == 2 else "COMMIT")
            ctx.idem_write(idem, [("tiered", 0, val(tag + "i", r))])

    rounds("a", 10)
    before_stop = _wait_replicated(ctx, key, _all_local_past(2))
    first_leader = ctx.partitions("tiered")[0]["leader"]
    ctx.broker.nodes[first_leader].stop()
    deadline = time.monotonic() + 30
    while ctx.partitions("tiered")[0]["leader"] in (first_leader, -1):
        if time.monotonic() > deadline:
            raise RuntimeError("tiered-0 leader did not move")
        time.sleep(0.2)
    while_stopped = ctx.partitions("tiered")
    rounds("b", 6)
    ctx.broker.start_node(first_leader)
    isr = ctx.wait_isr_full(["tiered", "__transaction_state", "__remote_log_metadata"], timeout=120)
    rounds("c", 6)
    n = len(before_stop["remote_segment_bases"])
    after = _wait_replicated(ctx, key, lambda s: _all_local_past(n + 2)(s)
                             and min(s["local_segment_bases"].values())[0] > max(before_stop["remote_segment_bases"]))
    time.sleep(3)  # a few more copy / retention rounds
    rounds("d", 2)  # local data above the tiered part (the active segment is never copied)
    final = _replicated_state(ctx, key)
    ctx.record_end_offsets([("tiered", 0)])
    isr_final = ctx.wait_isr_full(["tiered", "__transaction_state"])
    ctx.extra_dirs[TIERED_STORE_NAME] = REPLICATED_STORE
    ctx.ending_text = "clean shutdown (SIGTERM) of all 3 nodes at once, every replica in the ISR"
    return {
        "description": sc_tiered_storage_replicated.__doc__,
        "steps": {"placement_at_create": {key: placement[0]}, "segments_before_leader_stop": before_stop,
                  "stopped_leader": first_leader, "partitions_while_stopped": {key: while_stopped[0]},
                  "isr_after_restart": isr, "segments_after_restart": after, "segments_at_shutdown": final,
                  "isr_before_shutdown": isr_final,
                  "remote_store": f"{TIERED_STORE_NAME}/ (LocalTieredStorage rsm.config.dir of every node; the "
                                  "broker property points at the capture's work directory)"},
        "expect": {"anomalies": []},
    }
