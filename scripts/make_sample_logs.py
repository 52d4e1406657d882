#!/usr/bin/env python3
"""Write the synthetic demo broker log directory under sample_logs/.

Why this exists: the demo and several tests need a small log dir whose every
byte has a known meaning (committed, aborted and still-open transactions,
every codec, a rolled segment, a txnindex, producer snapshots and the
coordinator's ``__transaction_state`` records). The data batches are written
by an encoder that is *not ours*: kafka-python's
``kafka.record.default_records.DefaultRecordBatchBuilder``. Only what
kafka-python cannot write is assembled by hand, with struct.pack, here or by
the test encoders in tests/builders.py (markers, ``__transaction_state`` records):

* transaction markers (control batches, attributes 0x30) - clients never
  write them, the broker does;
* ``__transaction_state`` record keys/values (TransactionLogKey v0 /
  TransactionLogValue v0) - the records' bytes; the batches around them are
  again built by kafka-python;
* producer-state snapshots, ``.txnindex`` files, checkpoints,
  ``meta.properties`` and ``partition.metadata``.

Ground truth known by construction goes to ``expected.json`` next to the
broker dir. The output is byte-for-byte reproducible: fixed timestamps, a
seeded RNG, and gzip's header mtime pinned to 0 (kafka-python's gzip_encode
would otherwise stamp the wall clock into every gzip batch).

Snappy is written only if kafka-python can (it needs python-snappy); when it
cannot, those batches are written uncompressed and expected.json says so.

Run: ``.venv/bin/python scripts/make_sample_logs.py``
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import random
import shutil
import struct
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import crc32c
import kafka
import kafka.codec
from kafka.record.default_records import DefaultRecordBatchBuilder

from auditor.formats.txnlog import java_string_hash, partition_for

# The hand-assembled encodings (markers, __transaction_state key/value) are the
# tests' independent encoders: tests/builders.py is not a package, so put the
# tests dir on sys.path to import it (it imports nothing from auditor).
_TESTS = Path(__file__).resolve().parents[1] / "tests"
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))
from builders import marker, txn_log_key_v0, txn_log_value_v0  # noqa: E402

ROOT = Path(__file__).resolve().parents[1] / "sample_logs" / "synthetic-kafka-python"
BROKER = ROOT / "broker-1"

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z, every timestamp derives from it
SEED = 20231114
LEADER_EPOCH = 0  # partition leader epoch of every partition (fresh topics)
COORDINATOR_EPOCH = LEADER_EPOCH  # = leader epoch of the __transaction_state partition
TXN_STATE_PARTITIONS = 50  # transaction.state.log.num.partitions default
TRANSACTIONAL_ID = "payments-txn"
TXN_TIMEOUT_MS = 60_000
TOPIC = "payments"

TXN_PID, TXN_EPOCH = 1000, 0
IDEMPOTENT_PID, IDEMPOTENT_EPOCH = 2000, 0
PLAIN_PID = -1

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
STATE_IDS = {
    "Empty": 0, "Ongoing": 1, "PrepareCommit": 2, "PrepareAbort": 3,
    "CompleteCommit": 4, "CompleteAbort": 5,
}


# --------------------------------------------------------------------------- helpers
def txn_state_partition(transactional_id: str) -> int:
    return partition_for(transactional_id, TXN_STATE_PARTITIONS)


def kafka_uuid(rng: random.Random) -> str:
    """A Kafka Uuid as Kafka prints it: URL-safe base64 of 16 bytes, no padding."""
    return base64.urlsafe_b64encode(rng.randbytes(16)).decode("ascii").rstrip("=")


def pin_gzip_mtime() -> None:
    """Make kafka-python's gzip_encode reproducible: the gzip header's mtime is 0."""
    kafka.codec.gzip = types.SimpleNamespace(GzipFile=functools.partial(gzip.GzipFile, mtime=0))


def codec_available(name: str) -> bool:
    return {
        "none": lambda: True,
        "gzip": kafka.codec.has_gzip,
        "snappy": kafka.codec.has_snappy,
        "lz4": kafka.codec.has_lz4,
        "zstd": kafka.codec.has_zstd,
    }[name]()


# --------------------------------------------------------------------------- batch builders
def kafka_python_batch(
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    *,
    codec: str,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool,
) -> bytearray:
    """One v2 batch written by kafka-python (base offset 0, leader epoch 0 as a producer sends it)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODEC_IDS[codec],
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    for delta, (ts, key, value, headers) in enumerate(records):
        if builder.append(delta, timestamp=ts, key=key, value=value, headers=headers) is None:
            raise RuntimeError("batch_size too small")
    buf = builder.build()
    written_codec = struct.unpack_from(">h", buf, 21)[0] & 0x07
    if written_codec != CODEC_IDS[codec]:
        # kafka-python silently falls back to no compression when it does not pay off
        raise RuntimeError(f"kafka-python wrote codec {written_codec} instead of {codec}: make the data more compressible")
    return buf


def control_batch(*, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp: int) -> bytearray:
    """A transaction marker batch, assembled by hand (kafka-python cannot write control batches).

    Layout as MemoryRecords.writeEndTransactionalMarker writes it (tests/builders.py
    ``marker``): magic 2, attributes 0x30 (transactional + control, no codec,
    CreateTime), baseSequence -1, one record with key = int16 version 0 + int16
    type (0 ABORT, 1 COMMIT) and value = int16 version 0 + int32 coordinator epoch.
    Base offset and leader epoch are left 0 and patched on append (outside the CRC).
    """
    return bytearray(marker(0, producer_id, producer_epoch, commit=commit, coordinator_epoch=coordinator_epoch,
                            timestamp=timestamp, leader_epoch=0))


def txn_log_value(
    *, producer_id: int, producer_epoch: int, timeout_ms: int, state: str,
    partitions: dict[str, list[int]] | None, last_update_ms: int, start_ms: int,
) -> bytes:
    """TransactionLogValue v0 behind its int16 version prefix (non-flexible encoding).

    ``partitions`` None encodes a null array (int32 -1), which is what the
    coordinator writes for state Empty.
    """
    return txn_log_value_v0(
        producer_id, producer_epoch, timeout_ms, STATE_IDS[state],
        None if partitions is None else partitions.items(), last_update_ms, start_ms,
    )


# --------------------------------------------------------------------------- partition model
@dataclass
class ProducerEntry:
    """What the broker's ProducerStateManager would hold for one producer id."""

    producer_id: int
    producer_epoch: int = -1
    last_sequence: int = -1
    last_offset: int = -1
    offset_delta: int = 0
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    def snapshot_bytes(self) -> bytes:
        return struct.pack(
            ">qhiqiqiq",
            self.producer_id, self.producer_epoch, self.last_sequence, self.last_offset,
            self.offset_delta, self.last_timestamp, self.coordinator_epoch, self.current_txn_first_offset,
        )

    def as_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Segment:
    base_offset: int
    data: bytearray = field(default_factory=bytearray)
    aborted: list[dict] = field(default_factory=list)  # txnindex entries

    @property
    def stem(self) -> str:
        return f"{self.base_offset:020d}"


class PartitionLog:
    """Appends batches the way a leader does and tracks the ground truth."""

    def __init__(self, topic: str, partition: int, topic_id: str) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.segments = [Segment(0)]
        self.next_offset = 0
        self.batches: list[dict] = []
        self.markers: list[dict] = []
        self.transactions: list[dict] = []  # completed and open, in start order
        self.producers: dict[int, ProducerEntry] = {}
        self.snapshots: list[tuple[int, list[ProducerEntry]]] = []
        self.txn_records: list[dict] = []  # only for __transaction_state

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def _append(self, buf: bytearray, info: dict) -> dict:
        # the leader assigns the base offset and stamps its leader epoch; neither is under the CRC
        struct.pack_into(">q", buf, 0, self.next_offset)
        struct.pack_into(">i", buf, 12, LEADER_EPOCH)
        seg = self.segments[-1]
        (last_delta,) = struct.unpack_from(">i", buf, 23)
        row = {
            "segment": seg.stem + ".log",
            "position": len(seg.data),
            "size": len(buf),
            "base_offset": self.next_offset,
            "last_offset": self.next_offset + last_delta,
            "partition_leader_epoch": LEADER_EPOCH,
            **info,
        }
        seg.data += buf
        self.batches.append(row)
        self.next_offset += last_delta + 1
        return row

    def append_data(
        self, records: list[tuple[int, bytes | None, bytes | None, list]], *, codec: str,
        producer_id: int = PLAIN_PID, producer_epoch: int = -1, transactional: bool = False,
    ) -> dict:
        entry = self.producers.get(producer_id) if producer_id >= 0 else None
        if producer_id >= 0:
            if entry is None:
                entry = self.producers[producer_id] = ProducerEntry(producer_id)
            base_seq = entry.last_sequence + 1 if entry.producer_epoch == producer_epoch else 0
        else:
            base_seq = -1
        buf = kafka_python_batch(
            records, codec=codec, producer_id=producer_id, producer_epoch=producer_epoch,
            base_sequence=base_seq, transactional=transactional,
        )
        n = len(records)
        row = self._append(buf, {
            "kind": "data",
            "codec": codec,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "base_sequence": base_seq,
            "last_sequence": base_seq + n - 1 if base_seq >= 0 else -1,
            "is_transactional": transactional,
            "is_control": False,
            "record_count": n,
            "base_timestamp": records[0][0],
            "max_timestamp": max(r[0] for r in records),
            "keys_null": sum(1 for r in records if r[1] is None),
            "values_null": sum(1 for r in records if r[2] is None),
            "records_with_headers": sum(1 for r in records if r[3]),
        })
        if entry is not None:
            entry.producer_epoch = producer_epoch
            entry.last_sequence = row["last_sequence"]
            entry.last_offset = row["last_offset"]
            entry.offset_delta = row["last_offset"] - row["base_offset"]
            entry.last_timestamp = row["max_timestamp"]
            if transactional and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = row["base_offset"]
                self.transactions.append({
                    "producer_id": producer_id, "producer_epoch": producer_epoch,
                    "first_offset": row["base_offset"], "outcome": "OPEN",
                    "marker_offset": None, "data_batches": 0, "data_records": 0,
                })
            if transactional:
                txn = self.transactions[-1]
                txn["data_batches"] += 1
                txn["data_records"] += n
        return row

    def append_marker(self, *, producer_id: int, producer_epoch: int, commit: bool, timestamp: int) -> dict:
        buf = control_batch(
            producer_id=producer_id, producer_epoch=producer_epoch, commit=commit,
            coordinator_epoch=COORDINATOR_EPOCH, timestamp=timestamp,
        )
        control_type = "COMMIT" if commit else "ABORT"
        row = self._append(buf, {
            "kind": "marker",
            "codec": "none",
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "base_sequence": -1,
            "last_sequence": -1,
            "is_transactional": True,
            "is_control": True,
            "record_count": 1,
            "base_timestamp": timestamp,
            "max_timestamp": timestamp,
            "control_type": control_type,
            "coordinator_epoch": COORDINATOR_EPOCH,
        })
        self.markers.append({
            "offset": row["base_offset"], "control_type": control_type, "producer_id": producer_id,
            "producer_epoch": producer_epoch, "coordinator_epoch": COORDINATOR_EPOCH,
            "timestamp": timestamp, "segment": row["segment"],
        })
        entry = self.producers.setdefault(producer_id, ProducerEntry(producer_id))
        first = entry.current_txn_first_offset
        entry.producer_epoch = producer_epoch
        entry.coordinator_epoch = COORDINATOR_EPOCH
        entry.current_txn_first_offset = -1
        entry.last_timestamp = timestamp
        if first >= 0:
            txn = next(t for t in self.transactions if t["producer_id"] == producer_id and t["outcome"] == "OPEN")
            txn["outcome"] = control_type
            txn["marker_offset"] = row["base_offset"]
            if not commit:
                # LSO when the marker lands: earliest open txn of another producer, else marker + 1
                others = [e.current_txn_first_offset for e in self.producers.values()
                          if e.producer_id != producer_id and e.current_txn_first_offset >= 0]
                self.segments[-1].aborted.append({
                    "producer_id": producer_id,
                    "first_offset": first,
                    "last_offset": row["base_offset"],
                    "last_stable_offset": min(others) if others else row["base_offset"] + 1,
                })
        return row

    def append_txn_state(self, transactional_id: str, timestamp: int, **value_fields) -> dict:
        """One coordinator write to __transaction_state: a one-record batch built by kafka-python."""
        key = txn_log_key_v0(transactional_id)
        value = txn_log_value(**value_fields)
        buf = kafka_python_batch(
            [(timestamp, key, value, [])], codec="none", producer_id=-1, producer_epoch=-1,
            base_sequence=-1, transactional=False,
        )
        row = self._append(buf, {
            "kind": "txn_state", "codec": "none", "producer_id": -1, "producer_epoch": -1,
            "base_sequence": -1, "last_sequence": -1, "is_transactional": False, "is_control": False,
            "record_count": 1, "base_timestamp": timestamp, "max_timestamp": timestamp,
        })
        parts = value_fields["partitions"]
        self.txn_records.append({
            "offset": row["base_offset"],
            "transactional_id": transactional_id,
            "producer_id": value_fields["producer_id"],
            "producer_epoch": value_fields["producer_epoch"],
            "transaction_timeout_ms": value_fields["timeout_ms"],
            "state": value_fields["state"],
            "state_id": STATE_IDS[value_fields["state"]],
            "partitions": None if parts is None else [f"{t}-{p}" for t, ps in parts.items() for p in ps],
            "last_update_timestamp_ms": value_fields["last_update_ms"],
            "start_timestamp_ms": value_fields["start_ms"],
            "key_hex": key.hex(),
            "value_hex": value.hex(),
        })
        return row

    def snapshot(self) -> None:
        """Producer-state snapshot at the current log end (taken on roll and on clean shutdown)."""
        entries = [ProducerEntry(**e.as_json()) for _, e in sorted(self.producers.items())]
        self.snapshots.append((self.next_offset, entries))

    def roll(self) -> None:
        self.snapshot()
        self.segments.append(Segment(self.next_offset))

    # -- ground truth ---------------------------------------------------------------
    def open_transactions(self) -> list[dict]:
        return [
            {"producer_id": t["producer_id"], "producer_epoch": t["producer_epoch"], "first_offset": t["first_offset"],
             "last_timestamp": self.producers[t["producer_id"]].last_timestamp}
            for t in self.transactions if t["outcome"] == "OPEN"
        ]

    def truth(self) -> dict:
        hw = self.next_offset
        open_txns = self.open_transactions()
        lso = min([t["first_offset"] for t in open_txns] + [hw])
        return {
            "topic": self.topic,
            "partition": self.partition,
            "topic_id": self.topic_id,
            "log_start_offset": 0,
            "log_end_offset": self.next_offset,
            "high_watermark": hw,
            "last_stable_offset": lso,
            "segments": [
                {"file": s.stem + ".log", "base_offset": s.base_offset, "size": len(s.data),
                 "batches": sum(1 for b in self.batches if b["segment"] == s.stem + ".log")}
                for s in self.segments
            ],
            "batch_count": len(self.batches),
            "record_count": sum(b["record_count"] for b in self.batches),
            "codec_batches": {c: sum(1 for b in self.batches if b["codec"] == c)
                              for c in CODEC_IDS if any(b["codec"] == c for b in self.batches)},
            "batches": self.batches,
            "markers": self.markers,
            "transactions": self.transactions,
            "committed_transactions": sum(1 for t in self.transactions if t["outcome"] == "COMMIT"),
            "aborted_transactions": sum(1 for t in self.transactions if t["outcome"] == "ABORT"),
            "open_transactions": open_txns,
            "aborted_index": [
                {"file": s.stem + ".txnindex", **a} for s in self.segments for a in s.aborted
            ],
            "producer_snapshots": [
                {"file": f"{off:020d}.snapshot", "entries": [e.as_json() for e in entries]}
                for off, entries in self.snapshots
            ],
            **({"transaction_state_records": self.txn_records} if self.txn_records else {}),
        }

    # -- files --------------------------------------------------------------------------
    def write(self, broker: Path) -> None:
        d = broker / self.name
        d.mkdir(parents=True)
        for seg in self.segments:
            (d / f"{seg.stem}.log").write_bytes(bytes(seg.data))
            if seg.aborted:
                (d / f"{seg.stem}.txnindex").write_bytes(b"".join(
                    struct.pack(">hqqqq", 0, a["producer_id"], a["first_offset"], a["last_offset"], a["last_stable_offset"])
                    for a in seg.aborted
                ))
        for off, entries in self.snapshots:
            body = struct.pack(">i", len(entries)) + b"".join(e.snapshot_bytes() for e in entries)
            (d / f"{off:020d}.snapshot").write_bytes(struct.pack(">hI", 1, crc32c.crc32c(body)) + body)
        (d / "partition.metadata").write_text(f"version: 0\ntopic_id: {self.topic_id}\n")
        (d / "leader-epoch-checkpoint").write_text(f"0\n1\n{LEADER_EPOCH} 0\n")


# --------------------------------------------------------------------------- the scenario
class Scenario:
    def __init__(self) -> None:
        self.rng = random.Random(SEED)
        self.cluster_id = kafka_uuid(self.rng)
        self.directory_id = kafka_uuid(self.rng)
        payments_id = kafka_uuid(self.rng)
        txn_state_id = kafka_uuid(self.rng)
        self.txn_partition = txn_state_partition(TRANSACTIONAL_ID)
        self.p = [PartitionLog(TOPIC, 0, payments_id), PartitionLog(TOPIC, 1, payments_id)]
        self.txn_log = PartitionLog("__transaction_state", self.txn_partition, txn_state_id)
        self.clock = T0
        self.payment_no = 0
        self.txn_start = -1
        self.codecs = [c for c in CODEC_IDS if codec_available(c)]
        self.skipped = {c: "kafka-python cannot write it here (kafka.codec.has_%s() is False: python-snappy "
                           "is not installed)" % c for c in CODEC_IDS if not codec_available(c)}

    def tick(self, ms: int = 1000) -> int:
        self.clock += ms
        return self.clock

    def codec(self, wanted: str) -> str:
        return wanted if wanted in self.codecs else "none"

    def records(self, n: int, *, source: str, headers: bool = False, null_key_every: int = 0,
                tombstone_at: int = -1) -> list:
        """n payment events, 1 ms apart, repetitive enough that every codec pays off."""
        start = self.tick()
        out = []
        for i in range(n):
            self.payment_no += 1
            amount = self.rng.randrange(100, 100_000)
            key = None if null_key_every and i % null_key_every == 0 else f"customer-{self.rng.randrange(40):04d}".encode()
            value = None if i == tombstone_at else json.dumps(
                {"payment_id": self.payment_no, "source": source, "amount_cents": amount,
                 "currency": "EUR", "status": "AUTHORIZED", "note": "synthetic payment event"},
                sort_keys=True,
            ).encode()
            hdrs = [("trace-id", f"{self.payment_no:016x}".encode()), ("retry", None)] if headers else []
            out.append((start + i, key, value, hdrs))
        self.clock = start + n
        return out

    # producers --------------------------------------------------------------------
    def plain(self, part: int, n: int, codec: str) -> None:
        self.p[part].append_data(self.records(n, source="plain", null_key_every=5, tombstone_at=n - 1),
                                 codec=self.codec(codec))

    def idempotent(self, part: int, n: int, codec: str) -> None:
        self.p[part].append_data(self.records(n, source="idempotent"), codec=self.codec(codec),
                                 producer_id=IDEMPOTENT_PID, producer_epoch=IDEMPOTENT_EPOCH)

    def txn_data(self, part: int, n: int, codec: str) -> None:
        self.p[part].append_data(self.records(n, source="transactional", headers=True), codec=self.codec(codec),
                                 producer_id=TXN_PID, producer_epoch=TXN_EPOCH, transactional=True)

    def txn_state(self, state: str, parts: list[int] | None) -> None:
        now = self.tick()
        if state == "Ongoing" and self.txn_start < 0:
            self.txn_start = now
        self.txn_log.append_txn_state(
            TRANSACTIONAL_ID, now, producer_id=TXN_PID, producer_epoch=TXN_EPOCH, timeout_ms=TXN_TIMEOUT_MS,
            state=state, partitions=None if parts is None else {TOPIC: parts},
            last_update_ms=now, start_ms=self.txn_start,
        )
        if state.startswith("Complete"):
            self.txn_start = -1

    def end_txn(self, parts: list[int], commit: bool) -> None:
        self.txn_state("PrepareCommit" if commit else "PrepareAbort", parts)
        for part in parts:
            self.p[part].append_marker(producer_id=TXN_PID, producer_epoch=TXN_EPOCH, commit=commit,
                                       timestamp=self.tick(10))
        self.txn_state("CompleteCommit" if commit else "CompleteAbort", [])

    def run(self) -> None:
        self.txn_state("Empty", None)  # InitProducerId: pid 1000 epoch 0
        self.plain(0, 20, "gzip")
        self.idempotent(0, 15, "zstd")
        self.idempotent(1, 15, "zstd")
        self.plain(1, 20, "snappy")
        # txn 1: payments-0 then payments-1 added -> COMMIT
        self.txn_state("Ongoing", [0])
        self.txn_data(0, 5, "none")
        self.txn_state("Ongoing", [0, 1])
        self.txn_data(1, 6, "lz4")
        self.plain(1, 20, "lz4")
        self.end_txn([0, 1], commit=True)
        # txn 2: both partitions -> ABORT; payments-0 rolls a segment before its marker
        self.txn_state("Ongoing", [0, 1])
        self.txn_data(0, 8, "gzip")
        self.idempotent(0, 15, "zstd")
        self.txn_data(1, 8, "none")
        self.p[0].roll()
        self.end_txn([0, 1], commit=False)
        self.plain(0, 20, "gzip")
        self.plain(1, 20, "lz4")
        # txn 3: payments-0 only -> COMMIT
        self.txn_state("Ongoing", [0])
        self.txn_data(0, 5, "zstd")
        self.idempotent(1, 15, "zstd")
        self.end_txn([0], commit=True)
        # txn 4: both -> ABORT, with a non-transactional batch inside the txn's range
        self.txn_state("Ongoing", [0, 1])
        self.txn_data(0, 6, "snappy")
        self.txn_data(1, 6, "none")
        self.plain(0, 20, "gzip")
        self.end_txn([0, 1], commit=False)
        # txn 5: payments-1, never ended: the log stops with it open (hanging candidate)
        self.txn_state("Ongoing", [1])
        self.txn_data(1, 4, "none")
        self.idempotent(1, 15, "zstd")
        self.plain(0, 20, "gzip")
        # clean shutdown: a producer snapshot at every log end
        for log in (*self.p, self.txn_log):
            log.snapshot()

    # output ---------------------------------------------------------------------------
    def write(self) -> None:
        if ROOT.exists():
            shutil.rmtree(ROOT)
        BROKER.mkdir(parents=True)
        logs = sorted([*self.p, self.txn_log], key=lambda l: (l.topic, l.partition))
        for log in logs:
            log.write(BROKER)
        (BROKER / "meta.properties").write_text(
            "#\n#Written by scripts/make_sample_logs.py (synthetic)\n"
            f"cluster.id={self.cluster_id}\ndirectory.id={self.directory_id}\nnode.id=1\nversion=1\n"
        )

        def checkpoint(rows: list[tuple[str, int, int]]) -> str:
            return "0\n%d\n" % len(rows) + "".join(f"{t} {p} {o}\n" for t, p, o in rows)

        ends = [(l.topic, l.partition, l.next_offset) for l in logs]
        (BROKER / "replication-offset-checkpoint").write_text(checkpoint(ends))
        (BROKER / "recovery-point-offset-checkpoint").write_text(checkpoint(ends))
        # the broker only lists partitions whose log start is above their first segment's base
        (BROKER / "log-start-offset-checkpoint").write_text(checkpoint([]))

        truth = {
            "about": "Ground truth known by construction to scripts/make_sample_logs.py; "
                     "data batches written by kafka-python's DefaultRecordBatchBuilder, markers, "
                     "__transaction_state values, snapshots and txnindex assembled by hand.",
            "broker_dir": "broker-1",
            "kafka_python_version": kafka.__version__,
            "cluster_id": self.cluster_id,
            "directory_id": self.directory_id,
            "node_id": 1,
            "codecs_written": sorted({b["codec"] for l in logs for b in l.batches}, key=CODEC_IDS.get),
            "codecs_skipped": self.skipped,
            "transactional_id": TRANSACTIONAL_ID,
            "transactional_id_java_hash": java_string_hash(TRANSACTIONAL_ID),
            "transaction_state_partition": self.txn_partition,
            "transaction_timeout_ms": TXN_TIMEOUT_MS,
            "producers": {
                str(TXN_PID): {"kind": "transactional", "producer_epoch": TXN_EPOCH, "transactional_id": TRANSACTIONAL_ID},
                str(IDEMPOTENT_PID): {"kind": "idempotent", "producer_epoch": IDEMPOTENT_EPOCH},
                str(PLAIN_PID): {"kind": "plain (no producer id)"},
            },
            "partitions": {l.name: l.truth() for l in logs},
        }
        (ROOT / "expected.json").write_text(json.dumps(truth, indent=1) + "\n")


def main() -> None:
    pin_gzip_mtime()
    s = Scenario()
    s.run()
    s.write()
    total = sum(f.stat().st_size for f in ROOT.rglob("*") if f.is_file())
    print(f"wrote {ROOT} ({total} bytes); codecs skipped: {s.skipped or 'none'}")


if __name__ == "__main__":
    main()
