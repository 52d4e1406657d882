"""The producer-state model in plain Python: Kafka's ``ProducerStateManager``, one batch at a time.

This is the reference execution of the model (the Spark derivation in
:mod:`auditor.model.producer_state.spark` computes the same thing over whole tables,
and a property test holds the two equal). The forensic ``timeline`` replays a
partition through it, and the broker-oracle test compares it with Kafka's own
log loading, so its rules are taken from Kafka's storage code, names included:

* a producer's state is a :class:`ProducerStateEntry`: epoch, coordinator
  epoch, last timestamp, the first offset of its open transaction
  (``current_txn_first_offset``) and the metadata of its last
  :data:`NUM_BATCHES_TO_RETAIN` data batches (the broker's duplicate window);
* a data batch (``ProducerAppendInfo.appendDataBatch``) adds its metadata (an
  epoch change drops the old metadata) and, if transactional while no
  transaction is open, opens one at its base offset;
* a COMMIT/ABORT marker (``appendEndTxnMarker``) takes the marker's epoch and
  coordinator epoch and closes the open transaction, which becomes a
  *completed* transaction. A control batch without records (the cleaner
  emptied it) is ignored, as the broker ignores it;
* the *first unstable offset* is the first offset of the earliest transaction
  that is still open or whose marker is not yet below the high watermark
  (``ongoingTxns`` and ``unreplicatedTxns``); the *last stable offset* is that
  offset when it is below the high watermark, else the high watermark.

:func:`load_replica` is the broker's log loading on top of it
(``UnifiedLog.rebuildProducerState``): the newest producer snapshot inside the
log, entries of expired producers dropped, then the batches after it.

Batches are mappings with the ``batches`` table's column names, so rows from
Spark (``Row.asDict()``), from pyarrow or from the decoders all fit.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

NUM_BATCHES_TO_RETAIN = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
MARKER_TYPES = ("COMMIT", "ABORT")


def is_marker(b: Mapping[str, Any]) -> bool:
    """A COMMIT/ABORT control batch that still holds its marker record (the cleaner
    may leave an emptied control batch behind: the broker skips those)."""
    return bool(b["is_control"]) and b.get("control_type") in MARKER_TYPES


def first_sequence(last_seq: int, offset_delta: int) -> int:
    """``DefaultRecordBatch.decrementSequence``: sequences wrap after INT32_MAX to 0."""
    if last_seq < offset_delta:
        return INT32_MAX - (offset_delta - last_seq) + 1
    return last_seq - offset_delta


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """``ProducerAppendInfo.inSequence``."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return first_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batch_metadata: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    def maybe_update_producer_epoch(self, epoch: int) -> None:
        if self.producer_epoch != epoch:
            self.batch_metadata.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        self.maybe_update_producer_epoch(epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate_batch(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this sequence range (a retry the broker answers from cache)."""
        if epoch != self.producer_epoch:
            return None
        for m in self.batch_metadata:
            if m.first_seq == first_seq and m.last_seq == last_seq:
                return m
        return None

    def as_dict(self) -> dict[str, Any]:
        """The fields the broker oracle reports for an entry."""
        return {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "coordinator_epoch": self.coordinator_epoch, "first_sequence": self.first_seq,
                "last_sequence": self.last_seq, "last_data_offset": self.last_data_offset,
                "current_txn_first_offset": self.current_txn_first_offset, "last_timestamp": self.last_timestamp}


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction closed by a marker: ``CompletedTxn`` (first offset, marker offset, abort?)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True)
class AppendResult:
    """What one batch did to the state: the transaction it opened (its first
    offset) or completed, and the entry's epoch before it (sessions)."""

    producer_id: int
    opened_txn: int | None = None
    completed_txn: CompletedTxn | None = None
    closed_nothing: bool = False  # a marker while the producer had no open transaction
    previous_epoch: int | None = None  # None: the producer was unknown


class ProducerStateManager:
    """Producer entries and transactions of one partition replica, updated batch by
    batch in offset order (the broker's replication-origin append path: no sequence
    or epoch is refused, every batch is applied)."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing: dict[int, int] = {}  # first offset -> producer id  (ongoingTxns)
        self.unreplicated: dict[int, CompletedTxn] = {}  # first offset -> completed txn (unreplicatedTxns)
        self.map_end_offset = 0

    # -- updates ------------------------------------------------------------------
    def load_entry(self, e: ProducerStateEntry) -> None:
        """``loadProducerEntry``: an entry from a snapshot."""
        self.producers[e.producer_id] = e
        if e.current_txn_first_offset is not None:
            self.ongoing[e.current_txn_first_offset] = e.producer_id

    def append(self, b: Mapping[str, Any]) -> AppendResult | None:
        """Apply one batch (any batch: those without a producer id change nothing)."""
        pid = b["producer_id"]
        if pid is None or pid < 0:
            return None
        self.map_end_offset = max(self.map_end_offset, b["last_offset"] + 1)
        entry = self.producers.get(pid)
        prev_epoch = None if entry is None else entry.producer_epoch
        if b["is_control"]:
            if not is_marker(b):
                return AppendResult(pid, previous_epoch=prev_epoch)
            if entry is None:
                entry = self.producers[pid] = ProducerStateEntry(pid)
            first = entry.current_txn_first_offset
            completed = None
            if first is not None:
                completed = CompletedTxn(pid, first, b["base_offset"], b["control_type"] == "ABORT")
            entry.maybe_update_producer_epoch(b["producer_epoch"])
            entry.coordinator_epoch = b["coordinator_epoch"] if b["coordinator_epoch"] is not None else -1
            entry.current_txn_first_offset = None
            entry.last_timestamp = b["max_timestamp"]
            if completed is not None:
                self.ongoing.pop(completed.first_offset, None)
                self.unreplicated[completed.first_offset] = completed
            return AppendResult(pid, completed_txn=completed, closed_nothing=completed is None, previous_epoch=prev_epoch)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        entry.add_batch(b["producer_epoch"], b["last_sequence"], b["last_offset"], b["last_offset"] - b["base_offset"],
                        b["max_timestamp"])
        opened = None
        if entry.current_txn_first_offset is None and b["is_transactional"]:
            opened = entry.current_txn_first_offset = b["base_offset"]
            self.ongoing[opened] = pid
        # (a non-transactional batch inside an open transaction is refused by the broker on the
        # client path; on replication it is kept and the transaction stays open: so here)
        return AppendResult(pid, opened_txn=opened, previous_epoch=prev_epoch)

    def on_high_watermark(self, hw: int) -> None:
        """``onHighWatermarkUpdated``: completed transactions whose marker is below the HW are stable."""
        for first in [f for f, t in self.unreplicated.items() if t.last_offset < hw]:
            del self.unreplicated[first]

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> None:
        """``removeExpiredProducers``: producers without an open transaction, idle for ``expiration_ms``."""
        for pid in [p for p, e in self.producers.items() if is_expired(e, now_ms, expiration_ms)]:
            del self.producers[pid]

    # -- reads ---------------------------------------------------------------------
    def first_ongoing(self) -> tuple[int, int] | None:
        """(first offset, producer id) of the earliest open transaction."""
        if not self.ongoing:
            return None
        first = min(self.ongoing)
        return first, self.ongoing[first]

    def first_unstable_offset(self) -> int | None:
        firsts = list(self.ongoing) + list(self.unreplicated)
        return min(firsts) if firsts else None

    def last_stable_offset(self, high_watermark: int, log_start_offset: int = 0) -> int:
        """``UnifiedLog.lastStableOffset``: the first unstable offset (never below the
        log start) when it is below the high watermark, else the high watermark."""
        fuo = self.first_unstable_offset()
        if fuo is not None:
            fuo = max(fuo, log_start_offset)
            if fuo < high_watermark:
                return fuo
        return high_watermark


def effective_high_watermark(checkpoint: int | None, log_end_offset: int, log_dir_stopped: bool = True) -> int:
    """The high watermark the model counts with: the checkpointed one (``replication-offset-checkpoint``)
    capped at the log end, the log end when there is none, or when the log dir was not cleanly stopped
    (the checkpoint lags the log there: a lower bound; :func:`auditor.model.moving.stopped_log_dirs`)
    (:func:`load_replica`; the Spark form is ``hw`` of
    :func:`auditor.model.producer_state.spark.high_watermarks`, and
    :func:`auditor.model.replica.high_watermark_of` says where it comes from)."""
    if checkpoint is None or not log_dir_stopped:
        return log_end_offset
    return min(checkpoint, log_end_offset)


def log_start_offset(checkpoint: int | None, first_segment_base_offset: int | None) -> int:
    """The log start the model counts with (``LogLoader.load``): the larger of the log dir's
    ``log-start-offset-checkpoint`` entry and the first segment's base offset, either taken
    as 0 when unknown (the Spark form is ``log_start_offset`` of
    :func:`auditor.model.replica.log_bounds`)."""
    return max(checkpoint or 0, first_segment_base_offset or 0)


def is_expired(e: ProducerStateEntry, now_ms: int, expiration_ms: int) -> bool:
    """``isProducerExpired``: an open transaction keeps a producer alive."""
    return e.current_txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms


def entry_from_snapshot(row: Mapping[str, Any]) -> ProducerStateEntry:
    """A ``producer_snapshots`` row (one entry of a ``.snapshot`` file) as an entry."""
    e = ProducerStateEntry(int(row["producer_id"]), int(row["producer_epoch"]), int(row["coordinator_epoch"]),
                           int(row["last_timestamp"]))
    ctfo = row.get("current_txn_first_offset")
    e.current_txn_first_offset = None if ctfo is None or ctfo < 0 else int(ctfo)
    if row.get("last_offset") is not None and row["last_offset"] >= 0:
        e.batch_metadata.append(BatchMetadata(int(row["last_sequence"]), int(row["last_offset"]),
                                              int(row["offset_delta"]), int(row["last_timestamp"])))
    return e


@dataclass
class LoadedReplica:
    """A replica's producer state after loading, in the oracle's shape."""

    state: ProducerStateManager
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    snapshot_offset: int | None  # the snapshot the state was seeded from

    @property
    def first_unstable_offset(self) -> int | None:
        fuo = self.state.first_unstable_offset()
        return None if fuo is None else max(fuo, self.log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        return self.state.last_stable_offset(self.high_watermark, self.log_start_offset)

    def producers(self) -> list[dict[str, Any]]:
        return [self.state.producers[p].as_dict() for p in sorted(self.state.producers)]


def load_replica(batches: Iterable[Mapping[str, Any]], *, log_start_offset: int, log_end_offset: int,
                 snapshots: Mapping[int, Iterable[Mapping[str, Any]]] = {}, clean_shutdown: bool = False,
                 high_watermark: int | None = None, now_ms: int | None = None,
                 producer_id_expiration_ms: int = 86_400_000) -> LoadedReplica:
    """The producer state the broker builds when it loads this replica
    (``UnifiedLog.rebuildProducerState`` + ``ProducerStateManager.truncateAndReload``).

    ``batches``: the replica's live log in offset order. ``snapshots``: snapshot
    offset -> its entries (``producer_snapshots`` rows), live snapshot files only.

    * a clean shutdown with no snapshot file at all: the broker takes empty
      snapshots and replays nothing (the upgrade shortcut), so the state is empty;
    * otherwise snapshots outside (log start, log end] are dropped, the newest
      one left seeds the state (entries of expired producers dropped), and the
      batches from its offset on are replayed; without one, from the log start.

    ``high_watermark`` defaults to the log end, ``now_ms`` to "nothing expires"."""
    psm = ProducerStateManager()
    psm.map_end_offset = log_start_offset
    hw = effective_high_watermark(high_watermark, log_end_offset)
    used: int | None = None
    if not (clean_shutdown and not snapshots):
        usable = [o for o in snapshots if log_start_offset < o <= log_end_offset]
        start = log_start_offset
        if usable:
            used = max(usable)
            for row in snapshots[used]:
                e = entry_from_snapshot(row)
                if now_ms is None or not is_expired(e, now_ms, producer_id_expiration_ms):
                    psm.load_entry(e)
            start = used
        psm.map_end_offset = start
        for b in batches:
            if b["last_offset"] < start:
                continue
            psm.append(b)
        if not clean_shutdown:
            # recovery (LogLoader.recoverSegment) snapshots the state after each segment it recovers,
            # from the one holding the recovery point to the last; the load then seeds from the newest
            # of those, at the log end: the state as a snapshot keeps it
            psm = snapshot_round_trip(psm, now_ms, producer_id_expiration_ms)
    psm.on_high_watermark(hw)
    return LoadedReplica(psm, log_start_offset, log_end_offset, hw, used)


def snapshot_round_trip(psm: ProducerStateManager, now_ms: int | None, expiration_ms: int) -> ProducerStateManager:
    """The state written to a producer snapshot and read back (``writeSnapshot`` /
    ``readSnapshot`` / ``loadFromSnapshot``): one batch of metadata per producer
    (its last), expired producers dropped, completed transactions forgotten."""
    out = ProducerStateManager()
    out.map_end_offset = psm.map_end_offset
    for pid, e in psm.producers.items():
        n = ProducerStateEntry(pid, e.producer_epoch, e.coordinator_epoch, e.last_timestamp, e.current_txn_first_offset)
        if e.batch_metadata:
            last = e.batch_metadata[-1]
            n.batch_metadata.append(BatchMetadata(last.last_seq, last.last_offset, last.offset_delta, e.last_timestamp))
        if now_ms is None or not is_expired(n, now_ms, expiration_ms):
            out.load_entry(n)
    return out


def replay(batches: Iterable[Mapping[str, Any]], psm: ProducerStateManager | None = None
           ) -> Iterator[tuple[Mapping[str, Any], AppendResult | None, ProducerStateManager]]:
    """Apply ``batches`` in order, yielding each with what it did (the timeline's pass)."""
    psm = psm or ProducerStateManager()
    for b in batches:
        yield b, psm.append(b), psm


def transactions(batches: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every transaction of a replica's log from a full replay: the reference for
    :func:`auditor.model.producer_state.spark.transactions` (same columns, minus the
    replica key). A marker that closes nothing is a ``marker-only`` row."""
    psm = ProducerStateManager()
    open_rows: dict[int, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    last_marker: dict[int, dict[str, Any]] = {}
    for b in batches:
        r = psm.append(b)
        if r is None:
            continue
        pid = r.producer_id
        if b["is_control"]:
            if not is_marker(b):
                continue
            t = open_rows.pop(pid, None)
            if t is None:
                t = _txn_row(pid)
            t.update(marker_offset=b["base_offset"], marker_type=b["control_type"], marker_epoch=b["producer_epoch"],
                     coordinator_epoch=b["coordinator_epoch"], marker_timestamp=b["max_timestamp"])
            t["state"] = "marker-only" if t["data_batches"] == 0 else b["control_type"].lower()
            _link(t, last_marker.get(pid))
            last_marker[pid] = t
            out.append(t)
        elif b["is_transactional"]:
            t = open_rows.get(pid)
            if t is None:
                t = open_rows[pid] = _txn_row(pid)
                t["first_offset"] = b["base_offset"]
                t["first_timestamp"] = b["max_timestamp"]
            t["data_batches"] += 1
            t["last_data_offset"] = max(t["last_data_offset"], b["last_offset"]) if t["last_data_offset"] is not None else b["last_offset"]
            t["first_timestamp"] = min(t["first_timestamp"], b["max_timestamp"])
            t["last_data_timestamp"] = max(t["last_data_timestamp"] or b["max_timestamp"], b["max_timestamp"])
            e = b["producer_epoch"]
            t["data_epoch_min"] = e if t["data_epoch_min"] is None else min(t["data_epoch_min"], e)
            t["data_epoch_max"] = e if t["data_epoch_max"] is None else max(t["data_epoch_max"], e)
    for pid, t in open_rows.items():
        t["state"] = "open"
        _link(t, last_marker.get(pid))
        out.append(t)
    return out


def _txn_row(pid: int) -> dict[str, Any]:
    return {"producer_id": pid, "data_batches": 0, "first_offset": None, "last_data_offset": None,
            "first_timestamp": None, "last_data_timestamp": None, "data_epoch_min": None, "data_epoch_max": None,
            "marker_offset": None, "marker_type": None, "marker_epoch": None, "coordinator_epoch": None,
            "marker_timestamp": None, "state": None, "prev_marker_epoch": None, "prev_marker_offset": None,
            "prev_coordinator_epoch": None}


def _link(t: dict[str, Any], prev: dict[str, Any] | None) -> None:
    """The previous transaction's marker alongside (epoch and coordinator-epoch checks)."""
    if prev is not None:
        t["prev_marker_epoch"] = prev["marker_epoch"]
        t["prev_marker_offset"] = prev["marker_offset"]
        t["prev_coordinator_epoch"] = prev["coordinator_epoch"]
