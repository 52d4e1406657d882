"""Transactions on one broker: a clean mix, one left open by a crash, two hanging ones made by raw
requests on Kafka 3.5.2 (before transaction verification), and a coordinator's timeout abort."""

from __future__ import annotations

import random
import time

from scripts.capture.bookkeeping import Txn, coordinator_partition, tp
from scripts.capture.clients import ck_version
from scripts.capture.context import Ctx
from scripts.capture.raw import late_write
from scripts.capture.registry import scenario
from scripts.capture.workloads import mixed_rounds, val
from scripts.kafka.harness import NEWEST, PRE_VERIFICATION, RawConnection


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

    mixed_rounds(ctx, rng, a, b, j, idem)

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
        late = late_write(ctx, conn, p, "transfers-txn", "transfers", 0, p.sent_per_tp["transfers-0"],
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
    txn = Txn("accounts-txn", "confluent-kafka " + ck_version(), pid, epoch, ctx.tv_ck())
    p.send("accounts", 0, val("a", 1))
    for t, part, o in p.flush():
        txn.offsets.setdefault(tp(t, part), []).append(o)
    with RawConnection(ctx.broker.bootstrap) as conn:
        hang = late_write(ctx, conn, p, "accounts-txn", "accounts", 1, 0, [b"unadded-0", b"unadded-1", b"unadded-2"],
                           "transactional write to a partition never added with AddPartitionsToTxn")
    p.p.commit_transaction(30)
    txn.outcome = "COMMIT"
    txn.marker_epoch = p.identity()[1]
    txn.note = ("accounts-1 offsets %d-%d were written in this transaction by a raw ProduceRequest without "
                "AddPartitionsToTxn; they are not in `partitions` because no marker covers them" % (hang["first_offset"], hang["last_offset"]))
    ctx.rec.txns.append(txn)
    ctx.settle_markers(txn)
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
