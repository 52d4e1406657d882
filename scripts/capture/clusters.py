"""Three KRaft nodes (combined broker+controller, 3 voters): replication factor 3 with every replica in
the ISR, and a leader SIGKILLed while transactions are open on its partition."""

from __future__ import annotations

import random
import time

from scripts.capture.bookkeeping import coordinator_partition, tp
from scripts.capture.context import Ctx
from scripts.capture.registry import scenario
from scripts.capture.workloads import mixed_rounds, val
from scripts.kafka.harness import NEWEST

CLUSTER_OVERRIDES = {
    # a killed node is fenced (and its leaderships moved) after 4 s instead of 9 s
    "broker.session.timeout.ms": 4000,
    "broker.heartbeat.interval.ms": 500,
}


def internal_topics(ctx: Ctx) -> list[str]:
    """The transaction and group internal topics that exist yet (created on first use)."""
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
    mixed_rounds(ctx, rng, a, b, j, idem)
    internal = internal_topics(ctx)
    isr = ctx.wait_isr_full(["orders"] + internal)
    ctx.record_end_offsets([("orders", i) for i in range(3)])
    ctx.ending_text = "clean shutdown (SIGTERM) of all 3 nodes at once, every replica in the ISR"
    return {
        "description": sc_cluster_rf3.__doc__,
        "steps": {"placement_at_create": {tp("orders", p): v for p, v in placement.items()},
                  "isr_before_shutdown": isr},
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
    isr = ctx.wait_isr_full([topic] + internal_topics(ctx), timeout=120)
    catch_up_s = time.monotonic() - t_restart
    ctx.ck_txn(t, [(topic, 0, val("t", 8)), (topic, 1, val("t", 108))], "COMMIT")
    ctx.java_txn(j, [(topic, 0, "j-9"), (topic, 1, "j-109")], "ABORT")
    ctx.java_txn(j, [(topic, 0, "j-10")], "COMMIT")
    ctx.idem_write(idem, [(topic, 1, val("i", 9))])
    ctx.record_end_offsets([(topic, 0), (topic, 1)])
    isr_final = ctx.wait_isr_full([topic] + internal_topics(ctx))
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
