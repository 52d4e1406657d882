"""Scenarios pinned to a Kafka release for what that release changes on disk (Kafka 4.4.0: the metadata
log's active indexes left at their preallocated size by a clean stop)."""

from __future__ import annotations

import random
import time

from scripts.capture.bookkeeping import Txn, coordinator_partition, tp
from scripts.capture.context import Ctx
from scripts.capture.registry import scenario
from scripts.capture.workloads import val
from scripts.kafka.harness import KAFKA_4_4


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
    ctx.settle_markers(jtxn)
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
