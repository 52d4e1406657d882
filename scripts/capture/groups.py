"""Consumer groups and transactions: pending and hanging transactional offset commits (KIP-447), the
KIP-848 consumer protocol and a KIP-932 share group."""

from __future__ import annotations

import time

from scripts.capture.bookkeeping import coordinator_partition, tp
from scripts.capture.context import Ctx
from scripts.capture.registry import scenario
from scripts.capture.workloads import val
from scripts.kafka.harness import NEWEST, PRE_VERIFICATION, RawConnection

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


SHARE_STATE_PARTITIONS = 3  # share.coordinator.state.topic.num.partitions in the group-protocol scenarios
GROUP_PROTOCOL_OVERRIDES = {"share.coordinator.state.topic.num.partitions": SHARE_STATE_PARTITIONS,
                            "share.coordinator.state.topic.replication.factor": 1,
                            "share.coordinator.state.topic.min.isr": 1}


def _poll_n(consumer, n: int, timeout: float = 40.0) -> list:
    """``n`` records from a consumer or share consumer, or RuntimeError after ``timeout`` seconds."""
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
