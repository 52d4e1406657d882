"""What a scenario did, as the clients saw it: the ground truth written into expected.json.

Only client-side bookkeeping goes here (producer ids/epochs the clients held, offsets from delivery
reports and produce responses, the outcome each client asked for), never anything read back from the
log dirs the auditor will read."""

from __future__ import annotations

from dataclasses import dataclass, field

from auditor.formats.txnlog import partition_for

INTERNAL_PARTITIONS = 5  # offsets.topic.num.partitions and transaction.state.log.num.partitions (harness)


def coordinator_partition(key: str, partitions: int = INTERNAL_PARTITIONS) -> int:
    """Partition of ``__transaction_state`` / ``__consumer_offsets`` that owns a transactional id / group."""
    return partition_for(key, partitions)  # the same formula for groups (GroupCoordinator.partitionFor)


def tp(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


# --------------------------------------------------------------------------------------------------
# Bookkeeping
# --------------------------------------------------------------------------------------------------
@dataclass
class Txn:
    transactional_id: str
    client: str
    producer_id: int
    producer_epoch: int
    transaction_version: int
    offsets: dict[str, list[int]] = field(default_factory=dict)
    outcome: str = "OPEN"
    marker_epoch: int | None = None
    marker_offsets: dict[str, int] = field(default_factory=dict)
    offset_commits: list[dict] = field(default_factory=list)
    note: str | None = None

    def as_json(self) -> dict:
        parts = {}
        for k, offs in sorted(self.offsets.items()):
            parts[k] = {"first_offset": min(offs), "last_offset": max(offs), "record_offsets": sorted(offs)}
            if k in self.marker_offsets:
                parts[k]["marker_offset"] = self.marker_offsets[k]
        for k, off in self.marker_offsets.items():
            parts.setdefault(k, {"record_offsets": []})["marker_offset"] = off
        d = {
            "transactional_id": self.transactional_id,
            "client": self.client,
            "transaction_version": self.transaction_version,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "outcome": self.outcome,
            "marker_epoch": self.marker_epoch,
            "partitions": parts,
        }
        if self.offset_commits:
            d["offset_commits"] = self.offset_commits
        if self.note:
            d["note"] = self.note
        return d


class Recorder:
    """What the scenario did, as the clients saw it."""

    def __init__(self) -> None:
        self.txns: list[Txn] = []
        self.writes: list[dict] = []  # non-transactional writes
        self.raw: list[dict] = []  # raw protocol requests and the broker's answers
        self.producers: dict[str, dict] = {}
        self.end_offsets: dict[str, dict] = {}
        self.keyed: dict[str, list] = {}  # compacted topics: partition -> [offset, key, tombstone, writer]

    def keyed_record(self, t: str, p: int, offset: int, key: bytes | None, tombstone: bool, writer: str) -> None:
        if key is not None:
            self.keyed.setdefault(tp(t, p), []).append([offset, key.decode(), tombstone, writer])

    def producer(self, name: str, **info) -> None:
        self.producers.setdefault(name, {"name": name}).update(info)

    def write(self, producer: str, kind: str, pid: int, epoch: int, records: list[tuple[str, int, int]], first_sequence: dict[str, int] | None = None) -> None:
        by_tp: dict[str, list[int]] = {}
        for t, p, o in records:
            by_tp.setdefault(tp(t, p), []).append(o)
        for k, offs in sorted(by_tp.items()):
            w = {"producer": producer, "kind": kind, "producer_id": pid, "producer_epoch": epoch, "partition": k,
                 "record_offsets": sorted(offs)}
            if first_sequence and k in first_sequence:
                w["first_sequence"] = first_sequence[k]
            self.writes.append(w)

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for t in self.txns:
            for k in set(t.offsets) | set(t.marker_offsets):
                c = out.setdefault(k, {"committed": 0, "aborted": 0, "open": 0})
                c[{"COMMIT": "committed", "ABORT": "aborted"}.get(t.outcome, "open")] += 1
        return dict(sorted(out.items()))
