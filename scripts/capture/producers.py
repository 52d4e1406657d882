"""Producer ids and epochs: an idempotent producer the broker no longer knows, zombie fencing with
transaction versions 0 and 2, and many producer-id blocks in the metadata log."""

from __future__ import annotations

import time

from scripts.capture.context import Ctx
from scripts.capture.raw import build_batch, raw_init_producer_id, raw_produce
from scripts.capture.registry import scenario
from scripts.capture.workloads import val
from scripts.kafka.harness import NEWEST, PRE_VERIFICATION, RawConnection

UNKNOWN_PRODUCER_EXPIRATION_MS = 6000  # producer.id.expiration.ms of the unknown-producer scenario


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
