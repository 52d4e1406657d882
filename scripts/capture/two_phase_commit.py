"""Two-phase commit (KIP-939): a prepared transaction the coordinator never times out."""

from __future__ import annotations

import time

from scripts.capture.bookkeeping import coordinator_partition, tp
from scripts.capture.context import Ctx
from scripts.capture.registry import scenario
from scripts.kafka.harness import NEWEST

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
    ctx.settle_markers(done)
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
