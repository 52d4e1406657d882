"""The producer-state model's two executions agree: Spark derivation == Python reference.

:mod:`auditor.model.producer_state.reference` applies batches one at a time as
Kafka's ``ProducerStateManager`` does; :mod:`auditor.model.producer_state.spark`
derives the same transactions and last stable offsets over whole tables. Here
hypothesis generates many replica logs at once — transactional and idempotent
producers, commits, aborts, markers without data, emptied control batches the
cleaner leaves, offset holes, epoch bumps, high watermarks below the log end —
and one Spark run per example must give, replica by replica, exactly the
reference's transactions, first unstable offset, last stable offset and pin.

The reference itself is checked against Kafka's own log loading in
``tests/test_broker_oracle.py``; the small cases below pin the broker rules
that matter most (marker semantics, emptied control batches, unreplicated
transactions).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest

from auditor.model.producer_state import reference as ref
from auditor.model.producer_state import spark as model

REPLICA = model.REPLICA
BATCH_SCHEMA = (
    "cluster_id string, broker_id int, log_dir string, topic string, partition int, magic int, source string, "
    "producer_id long, producer_epoch int, base_offset long, last_offset long, last_offset_delta int, base_sequence int, "
    "last_sequence int, record_count int, is_transactional boolean, is_control boolean, control_type string, "
    "coordinator_epoch int, max_timestamp long")
COMPARED = ("producer_id", "state", "data_batches", "first_offset", "last_data_offset", "first_timestamp",
            "last_data_timestamp", "data_epoch_min", "data_epoch_max", "marker_offset", "marker_type", "marker_epoch",
            "coordinator_epoch", "marker_timestamp", "prev_marker_epoch", "prev_marker_offset", "prev_coordinator_epoch")


def batch(offset: int, pid: int = -1, epoch: int = -1, *, n: int = 1, seq: int = -1, txn: bool = False,
          control: str | None = None, empty_control: bool = False, coord: int | None = None, ts: int = 0,
          kept: int | None = None) -> dict:
    """A ``batches`` row: data (``n`` offsets, ``kept`` records left by compaction) or a control batch."""
    is_control = control is not None or empty_control
    delta = 0 if is_control else n - 1
    return {"magic": 2, "source": "segment", "producer_id": pid, "producer_epoch": epoch, "base_offset": offset,
            "last_offset": offset + delta, "last_offset_delta": delta, "base_sequence": -1 if is_control else seq,
            "last_sequence": -1 if is_control or seq < 0 else seq + delta,
            "record_count": 0 if empty_control else (1 if is_control else (n if kept is None else kept)),
            "is_transactional": txn or is_control, "is_control": is_control,
            "control_type": None if empty_control else control, "coordinator_epoch": coord if control else None,
            "max_timestamp": ts}


@st.composite
def replica_logs(draw) -> list[dict]:
    """One replica's log: 0..3 producers interleaved, each a small state machine."""
    producers = draw(st.integers(1, 4))
    state = {p: {"epoch": draw(st.integers(0, 3)), "seq": 0, "open": False, "txn": draw(st.booleans())}
             for p in range(producers)}
    out: list[dict] = []
    offset = draw(st.integers(0, 20))
    ts = 1_000
    for _ in range(draw(st.integers(0, 30))):
        p = draw(st.integers(0, producers - 1))
        s = state[p]
        pid = 1000 + p
        ts += draw(st.integers(0, 50))
        offset += draw(st.sampled_from([0, 0, 0, 1, 5]))  # holes: compaction removed whole batches
        kind = draw(st.sampled_from(["data", "data", "data", "commit", "abort", "empty-control", "bump", "plain"]))
        if kind == "plain":
            out.append(batch(offset, ts=ts))
            offset += 1
        elif kind == "bump":
            s["epoch"] += 1
            s["seq"] = 0
        elif kind == "data":
            n = draw(st.integers(1, 3))
            txn = s["txn"] or False
            out.append(batch(offset, pid, s["epoch"], n=n, seq=s["seq"], txn=txn, ts=ts,
                             kept=draw(st.sampled_from([None, 0]))))
            s["seq"] += n
            s["open"] = s["open"] or txn
            offset += n
        elif kind == "empty-control":
            out.append(batch(offset, pid, s["epoch"], empty_control=True, ts=ts))
            offset += 1
        else:  # a marker, with or without an open transaction (the cleaner may have removed its data)
            if not s["txn"] and not draw(st.booleans()):
                continue
            marker_epoch = s["epoch"] + draw(st.sampled_from([0, 0, 1]))  # TV2 and fencing bump the marker's epoch
            out.append(batch(offset, pid, marker_epoch, control=kind.upper(), coord=draw(st.integers(0, 3)), ts=ts))
            s["epoch"] = marker_epoch
            s["open"] = False
            offset += 1
    return out


def _spark_rows(spark, logs: list[list[dict]], hws: list[int | None]):
    rows, parts = [], []
    for i, log in enumerate(logs):
        key = {"cluster_id": "c", "broker_id": 1, "log_dir": "/d", "topic": "t", "partition": i}
        rows += [{**key, **b} for b in log]
        end = (log[-1]["last_offset"] + 1) if log else 0
        start = log[0]["base_offset"] if log else 0
        parts.append((*key.values(), hws[i], end, start))
    cols = [c.split()[0] for c in BATCH_SCHEMA.split(", ")]
    b = spark.createDataFrame([tuple(r[c] for c in cols) for r in rows], BATCH_SCHEMA)
    p = spark.createDataFrame(parts, "cluster_id string, broker_id int, log_dir string, topic string, partition int, "
                                     "high_watermark long, log_end_offset long, log_start_offset long")
    t = model.transactions(model.producer_batches(b))
    return t.collect(), model.last_stable_offsets(t, p).collect()


def _check(spark, logs: list[list[dict]], hw_cut: list[int]) -> None:
    hws = []
    for log, cut in zip(logs, hw_cut):
        end = (log[-1]["last_offset"] + 1) if log else 0
        hws.append(None if cut < 0 else max(0, end - cut))
    txns, lsos = _spark_rows(spark, logs, hws)
    by_part: dict[int, list[tuple]] = {}
    for r in txns:
        by_part.setdefault(r["partition"], []).append(tuple(r[c] for c in COMPARED))
    lso_by = {r["partition"]: r for r in lsos}
    for i, log in enumerate(logs):
        want = sorted((tuple(t[c] for c in COMPARED) for t in ref.transactions(log)), key=repr)
        got = sorted(by_part.get(i, []), key=repr)
        assert got == want, f"replica {i}: transactions differ\nlog={log}"
        end = (log[-1]["last_offset"] + 1) if log else 0
        start = log[0]["base_offset"] if log else 0
        loaded = ref.load_replica(log, log_start_offset=start, log_end_offset=end, high_watermark=hws[i])
        row = lso_by.get(i)
        if not log:
            continue
        assert row["first_unstable_offset"] == loaded.first_unstable_offset, f"replica {i}: log={log}"
        assert row["last_stable_offset"] == loaded.last_stable_offset, f"replica {i}: log={log}"
        pin = loaded.state.first_ongoing()
        assert (None if row["pin"] is None else (row["pin"]["first_offset"], row["pin"]["producer_id"])) == pin
        assert row["open_transactions"] == len(loaded.state.ongoing)


@pytest.mark.spark
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(logs=st.lists(replica_logs(), min_size=1, max_size=25), data=st.data())
def test_spark_model_equals_reference(spark, logs, data):
    cuts = [data.draw(st.integers(-1, 3)) for _ in logs]
    _check(spark, logs, cuts)


# -- the broker rules, one case each --------------------------------------------------------------


def test_marker_closes_and_completed_txn_is_unstable_until_the_hw_passes_it():
    log = [batch(0, 7, 0, seq=0, txn=True), batch(1, 7, 0, seq=1, txn=True), batch(2, 7, 0, control="COMMIT", coord=4)]
    psm = ref.ProducerStateManager()
    for b in log:
        psm.append(b)
    psm.on_high_watermark(2)  # the marker is not yet replicated: unreplicatedTxns holds the transaction
    assert psm.first_unstable_offset() == 0 and psm.last_stable_offset(2) == 0
    psm.on_high_watermark(3)
    assert psm.first_unstable_offset() is None and psm.last_stable_offset(3) == 3
    e = psm.producers[7]
    assert (e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset, e.last_seq) == (0, 4, None, 1)
    # a broker that loads this log seeds from a snapshot at the log end, which forgets completed transactions
    loaded = ref.load_replica(log, log_start_offset=0, log_end_offset=3, high_watermark=2)
    assert loaded.first_unstable_offset is None and loaded.last_stable_offset == 2
    assert [m.last_seq for m in loaded.state.producers[7].batch_metadata] == [1]  # one batch survives a snapshot


def test_emptied_control_batch_does_not_close_the_transaction():
    """The cleaner leaves an empty control batch behind; the broker skips it (ProducerAppendInfo.append)."""
    log = [batch(0, 7, 0, seq=0, txn=True), batch(1, 7, 0, empty_control=True)]
    loaded = ref.load_replica(log, log_start_offset=0, log_end_offset=2)
    assert loaded.state.first_ongoing() == (0, 7)
    assert [t["state"] for t in ref.transactions(log)] == ["open"]


def test_marker_epoch_bump_clears_the_duplicate_window():
    """An epoch change (TV2 commit, fencing) drops the retained batch metadata: maybeUpdateProducerEpoch."""
    log = [batch(0, 7, 0, seq=0, txn=True), batch(1, 7, 1, control="COMMIT", coord=0)]
    e = ref.load_replica(log, log_start_offset=0, log_end_offset=2).state.producers[7]
    assert e.producer_epoch == 1 and e.last_seq == -1 and not e.batch_metadata


def test_snapshot_seeds_the_state_and_expired_producers_are_dropped():
    snap = {5: [{"producer_id": 7, "producer_epoch": 2, "coordinator_epoch": 1, "last_timestamp": 100,
                 "current_txn_first_offset": 3, "last_sequence": 9, "last_offset": 4, "offset_delta": 1},
                {"producer_id": 8, "producer_epoch": 0, "coordinator_epoch": -1, "last_timestamp": 100,
                 "current_txn_first_offset": -1, "last_sequence": 4, "last_offset": 2, "offset_delta": 0}]}
    log = [batch(3, 7, 2, n=2, seq=8, txn=True), batch(5, 9, 0, seq=0, ts=200)]
    loaded = ref.load_replica(log, log_start_offset=0, log_end_offset=6, snapshots=snap, now_ms=100 + 1000,
                              producer_id_expiration_ms=1000)
    # producer 8 expired (idle 1000 ms, no open transaction); 7 kept by its open transaction
    assert sorted(loaded.state.producers) == [7, 9]
    assert loaded.first_unstable_offset == 3 and loaded.snapshot_offset == 5
    # the batch at offset 3 is before the snapshot: not replayed again
    assert loaded.state.producers[7].last_seq == 9


def test_clean_shutdown_without_snapshot_loads_no_producers():
    """UnifiedLog.rebuildProducerState's upgrade shortcut."""
    log = [batch(0, 7, 0, seq=0, txn=True)]
    assert ref.load_replica(log, log_start_offset=0, log_end_offset=1, clean_shutdown=True).state.producers == {}
    assert ref.load_replica(log, log_start_offset=0, log_end_offset=1).state.first_ongoing() == (0, 7)


def test_sequence_wraps_after_int32_max():
    assert ref.first_sequence(1, 3) == ref.INT32_MAX - 1
    assert ref.in_sequence(ref.INT32_MAX, 0) and not ref.in_sequence(5, 7)


@pytest.mark.spark
def test_keyed_by_replica_id_same_rows_as_by_the_replica_columns(spark):
    """A large dump's producer state is sorted by a dense replica id and the replica's columns
    joined back (``engine.views._per_producer``): the same transactions and sequence breaks as
    keyed by the columns themselves, for replicas that differ in one key column each, a null
    broker id (a log dir without meta.properties) among them."""
    log = [batch(0, 7, 0, seq=0, txn=True), batch(1, 7, 0, seq=1, txn=True), batch(2, 7, control="COMMIT", coord=3),
           batch(3, 8, 1, seq=0), batch(4, 8, 1, seq=1), batch(5, 8, 1, seq=5), batch(6, 8, 1, seq=5),
           batch(7, 7, 0, seq=2, txn=True), batch(8, 8, 2, seq=0), batch(9, 7, 0, seq=3, n=2, txn=True)]
    keys = [("c", 1, "/d", "t", 0), ("c", None, "/d", "t", 0), ("c", 2, "/d", "t", 0), ("c", 1, "/e", "t", 0),
            ("c", 1, "/d", "u", 0), ("c", 1, "/d", "t", 1), ("c2", 1, "/d", "t", 0)]
    cols = [c.split()[0] for c in BATCH_SCHEMA.split(", ")]
    rows = []
    for k, key in enumerate(keys):
        kv = dict(zip(REPLICA, key))
        # each replica a slightly different log: the k-th replica lacks its k-th batch
        rows += [tuple({**kv, **b}[c] for c in cols) for i, b in enumerate(log) if i != k]
    pb = model.producer_batches(spark.createDataFrame(rows, BATCH_SCHEMA))
    ids = model.replica_ids(pb)
    assert sorted(r["replica_id"] for r in ids.collect()) == list(range(1, len(keys) + 1))
    keyed = model.by_replica_id(pb, ids)
    assert keyed.count() == pb.count()
    for derive in (model.transactions, model.sequence_breaks):
        want = derive(pb).collect()
        got = model.with_replica(derive(keyed, key=["replica_id"]), ids).collect()
        assert want and {tuple(r[c] for c in REPLICA) for r in want} == set(keys)
        assert sorted(map(repr, got)) == sorted(map(repr, want))
