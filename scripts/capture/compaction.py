"""Compacted topics with Kafka's log cleaner running for real: on a cluster whose replicas are cleaned
differently, a cleaner that empties the producer's last marker, and a hanging transaction that stops
the cleaner on Kafka 3.5.2. What the cleaner did is checked with :mod:`scripts.capture.inspection`."""

from __future__ import annotations

import json
import random
import time

from scripts.capture.bookkeeping import tp
from scripts.capture.clusters import CLUSTER_OVERRIDES, internal_topics
from scripts.capture.context import Ctx
from scripts.capture.inspection import (batch_at, checkpoint_offsets, compaction_state, emptied_marker,
                                        first_pass_done, full_abort, second_pass_done, wait_compaction)
from scripts.capture.raw import late_write
from scripts.capture.registry import scenario
from scripts.capture.workloads import ck_kv, kv_round
from scripts.kafka.harness import NEWEST, PRE_VERIFICATION, RawConnection

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
            writes = kv_round(ctx, rng, r, topic, parts, tag)
            if r % 2 == 0:
                ctx.ck_txn(a, ck_kv(writes), outcome)
            else:
                ctx.java_txn(j, [(t, p, k, v) for t, p, k, v in writes], outcome)
            if r % 3 == 1:
                part = rng.choice(parts)
                ctx.idem_write(idem, ck_kv([(topic, part, f"k{rng.randrange(6)}", None if rng.random() < 0.25 else f"i{r}")
                                             for _ in range(2)]))

    phase(range(0, 20), "p1-")
    t0 = time.monotonic()
    s1 = wait_compaction(ctx, topic, parts, [1, 2, 3], first_pass_done, "first cleaner pass on all nodes")
    first_pass_s = time.monotonic() - t0
    checkpoints_phase1 = {b: {k: v["cleaner_checkpoint"] for k, v in d.items()} for b, d in s1.items()}
    # node 3's cleaner stops: restart it with the (deprecated, still accepted in 4.3.1) log.cleaner.enable=false
    ctx.broker.restart_node(3, {"log.cleaner.enable": "false"})
    isr_after_restart = ctx.wait_isr_full([topic] + internal_topics(ctx))
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
    internal = internal_topics(ctx)
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
        ctx.idem_write(idem, ck_kv([(topic, part, f"k{(nudges + i) % 3}", f"n{nudges}.{i}") for i in range(2)]))
        nudges += 1
        time.sleep(2.2)
    emptied_s = time.monotonic() - t0
    if not full_abort(seen["broker-3"]):
        raise RuntimeError(f"node 3 does not hold the ABORT marker at {k}:{marker} with its record: {seen['broker-3']}")
    isr = ctx.wait_isr_full([topic] + internal_topics(ctx))
    ctx.record_end_offsets([(topic, part)])
    ctx.ending_text = "clean shutdown (SIGTERM) of all 3 nodes at once, every replica in the ISR"

    def verify() -> dict:
        final = at_marker()
        ck = {b: checkpoint_offsets(d / "cleaner-offset-checkpoint").get(k) for b, d in
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
                "verified": f"on the stopped log dirs, before copying, with auditor.formats' batch decoder: at "
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
        ctx.ck_txn(p, ck_kv(kv_round(ctx, rng, r, topic, parts, "a")), "ABORT" if r % 4 == 3 else "COMMIT")
        if r % 3 == 1:
            ctx.idem_write(idem, ck_kv([(topic, rng.choice(parts), f"k{rng.randrange(6)}", f"i{r}") for _ in range(2)]))
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
        ctx.ck_txn(p, ck_kv([(topic, q, f"k{rng.randrange(6)}", f"n{nudges}") for q in parts]), "COMMIT")
        nudges += 1
        time.sleep(1.0)
    cleaned_s = time.monotonic() - t0
    aborted = ctx.ck_txn(p, ck_kv([(topic, 0, "k1", "doomed-0"), (topic, 0, "k2", "doomed-1")]), "ABORT")
    with RawConnection(ctx.broker.bootstrap) as conn:
        late = late_write(ctx, conn, p, "kv-hang-txn", topic, 0, p.sent_per_tp[tp(topic, 0)],
                           [b"late-0", b"late-1"], "late write after the ABORT marker of the previous transaction",
                           keys=[b"k1", b"k2"])
    for r in range(16, 24):
        ctx.ck_txn(p, ck_kv(kv_round(ctx, rng, r, topic, [1], "b")), "COMMIT")
        ctx.idem_write(idem, ck_kv([(topic, 0, f"k{rng.randrange(6)}", f"i{r}")]))
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
