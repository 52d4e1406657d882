"""Replay one partition replica's batches in offset order, interleaved with coordinator records.

The state is the producer-state model's reference execution
(:class:`auditor.model.producer_state.reference.ProducerStateManager`): each batch is
applied as the broker applies it, and the last stable offset (LSO) at every
point is the model's (``ProducerStateManager.last_stable_offset``), asked with
the log end as the high watermark -- the dump holds no history of the HW --
except at the final ``end`` event, which asks with the replica's high watermark as
the model counts with it (:class:`auditor.model.replica.HighWatermark`, the one
``stuck-lso`` reports). The replay computes no LSO or high watermark of its own. That is what a forensic
timeline needs to show *when* a partition got stuck and by whom.

Pure Python on purpose: Spark or pyarrow (:mod:`auditor.forensics.timeline`)
selects and sorts the (bounded) rows of the live log, this module consumes them
as a stream, so its memory is the number of producers and pending runs (and the
involved ids' coordinator records, read ahead), not the partition's size.

A data batch that opens a transaction of a producer session (id, epoch) which
already wrote a marker on this partition (marker epoch >= data epoch, or > under
transaction version 2, which bumps the epoch at every commit or abort: the
hanging-transaction rule's ``late-write`` condition, :mod:`auditor.model.verdicts`)
is a **late write** when no ``Ongoing`` coordinator record of the producer names
this partition at or after that marker (``anomalies: ["late write"]``); without
coordinator records of the producer, data after an ABORT marker is marked
``after ABORT``. The ``end`` event is stamped with the newest instant replayed.
Events are flat dicts
with a fixed set of common keys (see :data:`COMMON_KEYS`) so ``--format jsonl``
has a stable shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator, Mapping

from auditor.model.producer_state.reference import ProducerStateEntry, ProducerStateManager, is_marker
from auditor.model.replica import HighWatermark

COMMON_KEYS = ("event", "source", "time_ms", "time", "offset", "last_offset", "producer_id", "producer_epoch",
               "transactional_id", "lso", "log_end", "detail", "anomalies")
LATE_WRITE = "late write"  # data of a session after its marker here, no coordinator record adding the partition again
AFTER_ABORT = "after ABORT"  # the same without coordinator records to tell (an ABORT marker's session writing on)
LSO_HELD_BY_LATE_WRITE = "LSO held by a late write"


def iso_ms(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds (``2026-11-20T10:00:00.123Z``)."""
    if ms is None or ms < 0:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return None


def _n(count: int | None, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


@dataclass
class ReplayOptions:
    """What the view shows; bounds are already resolved to offsets by the caller."""

    topic: str | None = None  # the partition replayed: coordinator records say whether they name it
    partition: int | None = None
    producer_id: int | None = None  # show only this producer's batches (the LSO still counts everyone)
    summary: bool = True  # collapse runs of ordinary data batches of one producer session
    bounded_from: bool = False  # the view starts after the log start (--from given)
    coord_from_ms: int | None = None  # --from as a time: coordinator records before it are hidden
    coord_to_ms: int | None = None  # --to as a time: coordinator records after it are hidden
    from_is_offset: bool = False  # --from as an offset: coordinator records before the first batch are hidden
    to_is_offset: bool = False  # --to as an offset: coordinator records after the last batch are hidden
    end_offset: int | None = None  # log end at the end of the view (replica log end, or --to + 1)
    # the replica's high watermark as the model counts with it (auditor.model.replica.high_watermark_of, or
    # producer_state.spark.high_watermarks), when the view reaches the log end; None: unknown for this view
    high_watermark: HighWatermark | None = None
    log_start_offset: int | None = None  # the replica's log start, when known (the model never puts the LSO below it)
    # offsets between segments that no segment as read holds (the model's holes: auditor.model.replica.offset_holes),
    # (from, to) with ``to`` exclusive, in offset order
    holes: tuple[tuple[int, int], ...] = ()


class _Peek:
    """An iterator with one element of look-ahead."""

    def __init__(self, it: Iterable[Mapping[str, Any]]) -> None:
        self._it = iter(it)
        self._head: Mapping[str, Any] | None = None
        self._done = False

    def head(self) -> Mapping[str, Any] | None:
        if self._head is None and not self._done:
            try:
                self._head = next(self._it)
            except StopIteration:
                self._done = True
        return self._head

    def pop(self) -> Mapping[str, Any]:
        h = self.head()
        assert h is not None
        self._head = None
        return h


class Replay:
    """One pass over a partition's batches (offset order) and the involved ids'
    coordinator records (time order), yielding timeline events.

    ``initial_open`` is the open-transaction state at the start of the view
    (``(producer_id, first_offset, epoch)``, from the rows before ``--from``), so
    a view starting in the middle of a long log needs no replay of its prefix.
    """

    def __init__(self, options: ReplayOptions, tid_by_pid: Mapping[int, str] | None = None,
                 initial_open: Iterable[tuple[int, int, int]] = ()) -> None:
        self.opts = options
        self.tid_by_pid = dict(tid_by_pid or {})
        self.state = ProducerStateManager()
        self._txn_epoch: dict[int, int] = {}  # producer id -> data epoch that opened its open transaction
        for pid, first, epoch in initial_open:
            self.state.load_entry(ProducerStateEntry(pid, epoch, current_txn_first_offset=first))
            self._txn_epoch[pid] = epoch
        self._epoch: dict[int, int] = {}  # producer id -> last epoch seen (sessions)
        self._runs: dict[tuple, dict[str, Any]] = {}
        self._coord_state: dict[str, str] = {}
        self.log_end: int | None = None
        self._last_offset: int | None = None
        self._first_batch_ms: int | None = None
        self._max_ms: int | None = None  # the newest instant replayed (batches and coordinator records shown)
        self.batches_seen = 0
        # late writes (the hanging-transaction rule's notion, auditor.model.verdicts): the last marker of
        # each producer on this partition, and when the coordinator put this partition in an ongoing
        # transaction of the producer (filled by run() from the coordinator records)
        self._marker: dict[int, tuple[int, int, str, int | None]] = {}  # pid -> (epoch, offset, type, time)
        self._listed: dict[int, list[int]] = {}  # pid -> times of Ongoing records naming this partition
        self._coord_pids: set[int] = set()  # producer ids the coordinator records name
        # producer ids shown to use transaction version 2 (auditor.model.decisions): a coordinator record's
        # ClientTransactionVersion, or a COMMIT marker above its data's epoch
        self._tv2: set[int] = set()
        self._late: set[int] = set()  # first offsets of transactions a late write opened

    # -- helpers -------------------------------------------------------------
    def _tid(self, pid: int | None) -> str | None:
        return None if pid is None else self.tid_by_pid.get(pid)

    def _pinned(self) -> tuple[int, int, int] | None:
        """(first offset, producer id, data epoch) of the earliest open transaction, if any."""
        p = self.state.first_ongoing()
        if p is None:
            return None
        first, pid = p
        return first, pid, self._txn_epoch.get(pid, self.state.producers[pid].producer_epoch)

    def _last_stable_offset(self, high_watermark: int | None) -> int | None:
        """The model's LSO (``ProducerStateManager.last_stable_offset``) at ``high_watermark``.
        Before the view's first batch there is no log end to stand for the high watermark:
        then it is the model's first unstable offset the view starts with (None: nothing open)."""
        if high_watermark is None:
            return self.state.first_unstable_offset()
        return self.state.last_stable_offset(high_watermark, self.opts.log_start_offset or 0)

    @property
    def lso(self) -> int | None:
        """The LSO now: the model's, with the log end so far as the high watermark."""
        return self._last_stable_offset(self.log_end)

    def _event(self, event: str, source: str, time_ms: int | None, *, offset: int | None = None,
               last_offset: int | None = None, producer_id: int | None = None, producer_epoch: int | None = None,
               detail: str = "", anomalies: list[str] | None = None, **extra: Any) -> dict[str, Any]:
        ev = {"event": event, "source": source, "time_ms": time_ms, "time": iso_ms(time_ms), "offset": offset,
              "last_offset": last_offset, "producer_id": producer_id, "producer_epoch": producer_epoch,
              "transactional_id": self._tid(producer_id), "lso": self.lso, "log_end": self.log_end, "detail": detail,
              "anomalies": list(anomalies or ())}
        ev.update(extra)
        return ev

    def _seen(self, time_ms: int | None) -> None:
        if time_ms is not None and (self._max_ms is None or time_ms > self._max_ms):
            self._max_ms = time_ms

    def _names_partition(self, parts: list[str] | None) -> bool | None:
        return None if not parts else f"{self.opts.topic}-{self.opts.partition}" in parts

    def _index_coordinator(self, records: list[Mapping[str, Any]]) -> None:
        """What the late-write check needs from the coordinator records: the producer ids
        they name, and when an ``Ongoing`` record of a producer named this partition."""
        for r in records:
            for k in ("producer_id", "previous_producer_id", "next_producer_id"):
                if r.get(k) is not None and r[k] >= 0:
                    self._coord_pids.add(r[k])
            if (r.get("client_transaction_version") or 0) >= 2 and r.get("producer_id") is not None:
                self._tv2.add(r["producer_id"])
            tps = r.get("topic_partitions")
            parts = None if tps is None else [f"{tp['topic']}-{tp['partition']}" for tp in tps]
            if (not r["is_tombstone"] and r.get("state") == "Ongoing" and r.get("producer_id") is not None
                    and self._names_partition(parts)):
                self._listed.setdefault(r["producer_id"], []).append(r["timestamp"])

    def _late_write(self, pid: int, epoch: int) -> tuple[tuple | None, bool | None]:
        """For a data batch opening a transaction: the marker its session (producer id, an epoch
        not above the marker's) already wrote here, if any, and whether it is a late write
        (no ``Ongoing`` record of the producer naming this partition at or after that marker;
        None when no coordinator record names the producer: the rows cannot tell)."""
        m = self._marker.get(pid)
        # transaction version 2 bumps the epoch at every commit or abort: the marker's epoch is the next
        # transaction's, and only data below it is late (ProducerAppendInfo.checkProducerEpoch)
        if m is None or epoch > m[0] or (epoch == m[0] and pid in self._tv2):
            return None, None
        if pid not in self._coord_pids:
            return m, None
        since = m[3] if m[3] is not None else -(1 << 62)
        return m, not any(ts is not None and ts >= since for ts in self._listed.get(pid, ()))

    def _visible(self, pid: int) -> bool:
        return self.opts.producer_id is None or pid == self.opts.producer_id

    # -- data ------------------------------------------------------------------
    @staticmethod
    def _seq(b: Mapping[str, Any]) -> str:
        if b["base_sequence"] is None or b["base_sequence"] < 0:
            return ""
        return f" seq {b['base_sequence']}..{b['last_sequence']}"

    def _data_event(self, b: Mapping[str, Any], opens: bool, session: str | None,
                    late: tuple[tuple | None, bool | None] = (None, None)) -> dict[str, Any]:
        kind = "transactional" if b["is_transactional"] else ("idempotent" if b["producer_id"] >= 0 else "plain")
        text = f"{kind} data batch, {_n(b['record_count'], 'record')}{self._seq(b)}"
        marker, is_late = late
        anomalies = []
        if marker is not None:
            where = f"its session's {marker[2]} marker at offset {marker[1]}"
            if is_late:
                anomalies.append(LATE_WRITE)
                text = f"late write after {where}, no coordinator record adds this partition again: " + text
            elif is_late is None and marker[2] == "ABORT":
                anomalies.append(AFTER_ABORT)
                text = f"written after {where} (no coordinator record to tell a late write): " + text
        if opens:
            text += "; opens a transaction"
        if session:
            text += f"; {session}"
        extra = {}
        if opens:
            extra = {"after_marker_offset": None if marker is None else marker[1], "late_write": is_late}
        return self._event(
            "data", "log", b["max_timestamp"], offset=b["base_offset"], last_offset=b["last_offset"],
            producer_id=b["producer_id"], producer_epoch=b["producer_epoch"], detail=text, batches=1,
            records=b["record_count"], first_sequence=b["base_sequence"], last_sequence=b["last_sequence"],
            transactional=bool(b["is_transactional"]), opens_transaction=opens, session_start=session is not None,
            anomalies=anomalies, **extra)

    def _add_to_run(self, b: Mapping[str, Any]) -> None:
        key = (b["producer_id"], b["producer_epoch"], bool(b["is_transactional"]))
        r = self._runs.get(key)
        if r is None:
            self._runs[key] = r = {"first": b, "batches": 0, "records": 0}
        r["last"] = b
        r["batches"] += 1
        r["records"] += b["record_count"] or 0
        r["lso"], r["log_end"] = self.lso, self.log_end

    def _flush(self) -> Iterator[dict[str, Any]]:
        """Pending runs, oldest first: they all precede the event about to be shown."""
        runs = sorted(self._runs.values(), key=lambda r: r["first"]["base_offset"])
        self._runs.clear()
        for r in runs:
            f, la = r["first"], r["last"]
            if r["batches"] == 1:
                ev = self._data_event(f, False, None)
            else:
                kind = "transactional" if f["is_transactional"] else ("idempotent" if f["producer_id"] >= 0 else "plain")
                seq = (f" seq {f['base_sequence']}..{la['last_sequence']}"
                       if f["base_sequence"] is not None and f["base_sequence"] >= 0 else "")
                ev = self._event(
                    "data-run", "log", f["max_timestamp"], offset=f["base_offset"], last_offset=la["last_offset"],
                    producer_id=f["producer_id"], producer_epoch=f["producer_epoch"],
                    detail=f"{r['batches']} {kind} data batches, {_n(r['records'], 'record')}{seq}",
                    batches=r["batches"], records=r["records"], first_sequence=f["base_sequence"],
                    last_sequence=la["last_sequence"], transactional=bool(f["is_transactional"]),
                    opens_transaction=False, session_start=False, last_time_ms=la["max_timestamp"])
            ev["lso"], ev["log_end"] = r["lso"], r["log_end"]
            yield ev

    def _session(self, pid: int, epoch: int) -> str | None:
        """A note when this batch starts a producer session (new producer id, or a new epoch)."""
        if pid < 0:
            return None
        prev = self._epoch.get(pid)
        self._epoch[pid] = epoch
        if prev is None:
            return "first batch of this producer in the view" if self.opts.bounded_from else "new producer"
        if prev != epoch:
            return f"new producer session (epoch {prev} -> {epoch})"
        return None

    def _lso_event(self, before: tuple | None, time_ms: int | None) -> Iterator[dict[str, Any]]:
        after = self._pinned()
        if after == before:
            return
        lso = self.lso
        if after is None:
            yield self._event("lso", "replay", time_ms, offset=lso, pinned=False,
                              detail=f"LSO moved to {lso}: no open transaction, it follows the log end")
            return
        _, pid, epoch = after
        tid = self._tid(pid)
        who = f"producer {pid}/{epoch}" + (f" ({tid})" if tid else "")
        if before is None:
            text = f"LSO held at {lso} by the open transaction of {who}"
        else:
            text = f"LSO moved to {lso}: the earliest open transaction is now {who}'s"
        yield self._event("lso", "replay", time_ms, offset=lso, producer_id=pid, producer_epoch=epoch,
                          pinned=True, detail=text)

    def _batch(self, b: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        pid, epoch = b["producer_id"], b["producer_epoch"]
        visible = self._visible(pid)
        before = self._pinned()
        self.log_end = b["last_offset"] + 1
        self._last_offset = b["last_offset"]
        self._seen(b["max_timestamp"])
        self.batches_seen += 1
        result = self.state.append(b)
        self.state.on_high_watermark(self.log_end)  # completed transactions are not kept: memory stays bounded
        if b["is_control"]:
            marker = is_marker(b)
            session = self._session(pid, epoch) if marker else None
            if marker and pid is not None and pid >= 0:
                self._marker[pid] = (epoch, b["base_offset"], b["control_type"], b["max_timestamp"])
            if marker:
                done = result.completed_txn if result is not None else None
                started = None if done is None else (done.first_offset, self._txn_epoch.pop(pid, epoch))
                if started is not None and b["control_type"] == "COMMIT" and epoch > started[1]:
                    self._tv2.add(pid)  # only transaction version 2 commits with a bumped epoch
                if visible:
                    if started is not None:
                        closes = f"closes the transaction from offset {started[0]}"
                        if started[1] != epoch:
                            closes += f" (data epoch {started[1]}, marker epoch {epoch})"
                    else:
                        closes = "no open transaction of this producer here"
                    if session:
                        closes += f"; {session}"
                    yield from self._flush()
                    yield self._event(
                        "marker", "log", b["max_timestamp"], offset=b["base_offset"], last_offset=b["last_offset"],
                        producer_id=pid, producer_epoch=epoch, control_type=b["control_type"],
                        coordinator_epoch=b["coordinator_epoch"], closes_offset=started[0] if started else None,
                        detail=f"{b['control_type']} marker coordEpoch {b['coordinator_epoch']}; {closes}")
            elif visible:
                yield from self._flush()
                what = f"{b['control_type']} control batch" if b["control_type"] else "empty control batch (emptied by the log cleaner)"
                yield self._event("control", "log", b["max_timestamp"], offset=b["base_offset"],
                                  last_offset=b["last_offset"], producer_id=pid, producer_epoch=epoch,
                                  control_type=b["control_type"], detail=what)
        else:
            opens = result is not None and result.opened_txn is not None
            late: tuple[tuple | None, bool | None] = (None, None)
            if opens:
                self._txn_epoch[pid] = epoch
                late = self._late_write(pid, epoch)
                if late[1]:
                    self._late.add(b["base_offset"])
            session = self._session(pid, epoch)
            if visible:
                if opens or session or not self.opts.summary:
                    yield from self._flush()
                    yield self._data_event(b, opens, session, late)
                else:
                    self._add_to_run(b)
        if self._pinned() != before:
            yield from self._flush()
            yield from self._lso_event(before, b["max_timestamp"])

    def _hole(self, start: int, end: int) -> Iterator[dict[str, Any]]:
        """A row for offsets no segment as read holds, where the replay passes them: what they
        held (data, markers) is unknown, so the producer state and LSO after them are the
        input's, not necessarily the broker's (the audit's verdicts say so: ``offsets-missing``)."""
        yield from self._flush()
        yield self._event(
            "gap", "log", None, offset=start, last_offset=end - 1, missing_offsets=end - start,
            detail=f"{_n(end - start, 'offset')} in no segment of the input: a segment left out or cut "
                   "short (a copy of a running broker), or batches the cleaner removed; what they held is unknown")

    # -- coordinator -------------------------------------------------------------
    def _coordinator_visible(self, r: Mapping[str, Any]) -> bool:
        ts = r["timestamp"]
        if self.opts.coord_from_ms is not None and ts < self.opts.coord_from_ms:
            return False
        if self.opts.coord_to_ms is not None and ts > self.opts.coord_to_ms:
            return False
        if self.opts.from_is_offset and (self._first_batch_ms is None or ts < self._first_batch_ms):
            return False
        return True

    def _coordinator(self, r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        tid = r["transactional_id"]
        prev = self._coord_state.get(tid)
        state = "tombstone" if r["is_tombstone"] else r["state"]
        self._coord_state[tid] = state
        if not self._coordinator_visible(r):
            return
        tps = r.get("topic_partitions")
        parts = None if tps is None else [f"{tp['topic']}-{tp['partition']}" for tp in tps]
        if r["is_tombstone"]:
            text = "tombstone: the transactional id expired or was removed"
        else:
            text = f"{prev} -> {state}" if prev else state
            if parts:
                text += " [" + ", ".join(parts) + "]"
        # an id's other transactions are shown too (they tell whether the coordinator moved on),
        # flagged so a reader can tell them from the ones that touch this partition
        names = self._names_partition(parts)
        yield from self._flush()
        self._seen(r["timestamp"])
        ev = self._event(
            "coordinator", "coordinator", r["timestamp"], producer_id=r.get("producer_id"),
            producer_epoch=r.get("producer_epoch"), detail=text, state=state, previous_state=prev,
            tombstone=bool(r["is_tombstone"]), partitions=parts, names_partition=names,
            coordinator_partition=r["partition"],
            coordinator_offset=r["offset"], transaction_timeout_ms=r.get("transaction_timeout_ms"),
            previous_producer_id=r.get("previous_producer_id"), next_producer_id=r.get("next_producer_id"),
            last_update_timestamp_ms=r.get("last_update_timestamp_ms"))
        ev["transactional_id"] = tid  # the record names it, whatever the producer id maps to
        yield ev

    # -- the pass ------------------------------------------------------------------
    def run(self, batches: Iterable[Mapping[str, Any]], coordinator: Iterable[Mapping[str, Any]] = ()
            ) -> Iterator[dict[str, Any]]:
        """Yield the events; the last one is always ``end``.

        The coordinator records (the involved ids' history: small) are read ahead once, so
        that a data batch can be told a late write when it is replayed: the coordinator's
        record adding the partition to a transaction is often stamped after its first batch."""
        records = list(coordinator)
        self._index_coordinator(records)
        coord = _Peek(records)
        holes = list(self.opts.holes)
        for b in batches:
            ts = b["max_timestamp"]
            if self._first_batch_ms is None:
                self._first_batch_ms = ts
            while (h := coord.head()) is not None and h["timestamp"] <= ts:
                yield from self._coordinator(coord.pop())
            while holes and holes[0][1] <= b["base_offset"]:
                yield from self._hole(*holes.pop(0))
            yield from self._batch(b)
        yield from self._flush()
        if not self.opts.to_is_offset:
            while coord.head() is not None:
                yield from self._coordinator(coord.pop())
        yield self._end()

    def _end(self) -> dict[str, Any]:
        end = self.opts.end_offset if self.opts.end_offset is not None else self.log_end
        self.log_end = end
        hw = self.opts.high_watermark
        # the model's LSO at the model's high watermark (the log end stands for it in a view that
        # stops before the log end)
        lso = self._last_stable_offset(None if end is None else hw.offset if hw is not None else end)
        opened = [{"producer_id": pid, "producer_epoch": self._txn_epoch.get(pid, self.state.producers[pid].producer_epoch),
                   "first_offset": first, "transactional_id": self._tid(pid)}
                  for first, pid in sorted(self.state.ongoing.items())]
        parts = [f"log end {end}"]
        parts.append(hw.describe() if hw is not None else "high watermark unknown for this view (it ends before the log end)")
        text = ", ".join(parts) + f"; LSO {lso}"
        if opened:
            text += ": held by " + ", ".join(
                f"producer {o['producer_id']}/{o['producer_epoch']}"
                + (f" ({o['transactional_id']})" if o["transactional_id"] else "") + f" since {o['first_offset']}"
                for o in opened)
        held = [o for o in opened if o["first_offset"] in self._late]
        for o in opened:
            o["late_write"] = o["first_offset"] in self._late
        # stamped with the newest instant replayed: never earlier than a row above it; high_watermark
        # and high_watermark_checkpoint as stuck-lso's evidence has them
        ev = self._event("end", "replay", self._max_ms, offset=end, detail=text,
                         high_watermark=None if hw is None else hw.offset,
                         high_watermark_checkpoint=hw.checkpoint if hw is not None and hw.lower_bound else None,
                         open_transactions=opened, anomalies=[LSO_HELD_BY_LATE_WRITE] if held else [])
        ev["lso"] = lso
        return ev
