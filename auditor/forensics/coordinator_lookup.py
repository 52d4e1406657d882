"""Which ``__transaction_state`` partition owns a transactional id, and what it recorded.

The broker maps a transactional id to a partition of ``__transaction_state``
with ``Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount``
(``TransactionStateManager.partitionFor``); the leader of that partition is
the id's transaction coordinator. Offline, that is how an operator finds which
directory of which broker holds an id's history, so the formula has to be the
broker's bit for bit:

* ``String.hashCode`` runs over UTF-16 code units (a character outside the
  BMP counts as its two surrogates), ``h = 31 * h + unit`` in int32 arithmetic;
* Kafka's ``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0, where ``Math.abs``
  would leave it negative (and Python's ``abs`` would give 2**31).

The partition count is the number of partitions the topic actually has (the
broker reads it from the metadata when the topic exists, the config
``transaction.state.log.num.partitions`` only before it is created), so it is
taken from the dump's metadata log when there is one.

Reads use pyarrow with filters: the lookup touches three small tables and
should not pay for a Spark session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from auditor.formats.txnlog import java_string_hash, partition_for
from auditor.model.clusters import cluster_key

from auditor.model.coordinator_partitions import (  # noqa: F401 - the command's answers carry them
    DEFAULT_PARTITIONS, TXN_TOPIC, PartitionCount, partition_counts)


@dataclass
class Lookup:
    """One cluster's answer for a transactional id."""

    cluster_id: str | None
    transactional_id: str
    java_hash: int
    partitions: PartitionCount
    partition: int
    records: list[dict[str, Any]] = field(default_factory=list)
    brokers: list[int] = field(default_factory=list)  # brokers whose copy the records came from
    stored_in: list[int] = field(default_factory=list)  # partitions the records were actually found in


def _dataset(tables_dir: Path, name: str):
    """A pyarrow dataset for a table (ingested Parquet or the warehouse's Delta), or
    None when the dump has no such table."""
    from auditor.tables.source import arrow_dataset

    return arrow_dataset(tables_dir, name)


def _known_clusters(tables_dir: Path) -> list[str | None]:
    d = _dataset(tables_dir, "files")
    if d is None:
        return []
    rows = d.to_table(columns=["cluster_id", "log_dir"]).to_pylist()
    keys = {cluster_key(r["cluster_id"], r["log_dir"]) for r in rows if r["log_dir"] is not None}
    return sorted(keys, key=lambda k: (k is None, k or ""))


_RECORD_COLUMNS = [
    "cluster_id", "broker_id", "log_dir", "partition", "offset", "timestamp", "record_type", "transactional_id",
    "value_version", "is_tombstone", "producer_id", "previous_producer_id", "next_producer_id", "producer_epoch",
    "transaction_timeout_ms", "state", "topic_partitions", "last_update_timestamp_ms", "start_timestamp_ms",
    "client_transaction_version",
]


def _records(tables_dir: Path, transactional_id: str) -> list[dict[str, Any]]:
    """Every ``transaction_log`` row for the id, one copy per (cluster, partition,
    offset): several brokers replicate a ``__transaction_state`` partition, and
    the lowest broker id's copy is kept — the audit's choice too
    (:func:`auditor.model.coordinator.records`), here with pyarrow so the lookup needs no Spark."""
    import pyarrow.compute as pc

    d = _dataset(tables_dir, "transaction_log")
    if d is None:
        return []
    from auditor.model.livelog import decide_for_tables, keep_rows

    cols = [c for c in _RECORD_COLUMNS if c in d.schema.names] + ["file", "batch_position"]
    rows = d.to_table(columns=cols, filter=pc.field("transactional_id") == transactional_id).to_pylist()
    rows = keep_rows(rows, "transaction_log", decide_for_tables(tables_dir))  # no .deleted copy of a cleaned segment
    best: dict[tuple, dict] = {}
    for r in rows:
        r["cluster_id"] = cluster_key(r["cluster_id"], r["log_dir"])
        k = (r["cluster_id"], r["partition"], r["offset"])
        cur = best.get(k)
        if cur is None or (r["broker_id"] if r["broker_id"] is not None else 1 << 40) < (
                cur["broker_id"] if cur["broker_id"] is not None else 1 << 40):
            best[k] = r
    return sorted(best.values(), key=lambda r: (r["cluster_id"] or "", r["partition"], r["offset"]))


def known_transactional_ids(tables_dir: str | Path) -> list[str]:
    """Every transactional id the tables' ``transaction_log`` names (to suggest one for a typo)."""
    d = _dataset(Path(tables_dir), "transaction_log")
    if d is None:
        return []
    ids = d.to_table(columns=["transactional_id"]).column("transactional_id").to_pylist()
    return sorted({i for i in ids if i is not None})


def lookup(tables_dir: str | Path, transactional_id: str, partitions: int | None = None) -> list[Lookup]:
    """One :class:`Lookup` per cluster holding records of the id, or per cluster
    in the dump when none does (a single cluster-less answer for an empty dump)."""
    root = Path(tables_dir)
    counts, default = partition_counts(root, partitions)
    records = _records(root, transactional_id)
    clusters: list[str | None] = sorted({r["cluster_id"] for r in records}, key=lambda k: (k is None, k or ""))
    if not clusters:
        clusters = _known_clusters(root) or [None]
    h = java_string_hash(transactional_id)
    out = []
    for c in clusters:
        n = counts.get(c, default)
        mine = [r for r in records if r["cluster_id"] == c]
        out.append(Lookup(
            cluster_id=c, transactional_id=transactional_id, java_hash=h, partitions=n,
            partition=partition_for(transactional_id, n.count), records=mine,
            brokers=sorted({r["broker_id"] for r in mine if r["broker_id"] is not None}),
            stored_in=sorted({r["partition"] for r in mine}),
        ))
    return out


def record_json(r: dict[str, Any]) -> dict[str, Any]:
    """A ``transaction_log`` row as a flat JSON object (partitions as ``topic-N``)."""
    from auditor.forensics.replay import iso_ms

    tps = r.get("topic_partitions")
    return {
        "type": "record",
        "cluster_id": r["cluster_id"],
        "broker_id": r.get("broker_id"),
        "coordinator_partition": r["partition"],
        "offset": r["offset"],
        "timestamp": r.get("timestamp"),
        "time": iso_ms(r.get("timestamp")),
        "is_tombstone": bool(r.get("is_tombstone")),
        "state": r.get("state"),
        "producer_id": r.get("producer_id"),
        "producer_epoch": r.get("producer_epoch"),
        "previous_producer_id": r.get("previous_producer_id"),
        "next_producer_id": r.get("next_producer_id"),
        "transaction_timeout_ms": r.get("transaction_timeout_ms"),
        "topic_partitions": None if tps is None else [f"{tp['topic']}-{tp['partition']}" for tp in tps],
        "last_update_timestamp_ms": r.get("last_update_timestamp_ms"),
        "start_timestamp_ms": r.get("start_timestamp_ms"),
        "client_transaction_version": r.get("client_transaction_version"),
    }


def lookup_json(lk: Lookup) -> dict[str, Any]:
    return {
        "type": "coordinator",
        "transactional_id": lk.transactional_id,
        "cluster_id": lk.cluster_id,
        "java_hash": lk.java_hash,
        "partition": lk.partition,
        "partitions": lk.partitions.count,
        "partitions_source": lk.partitions.source,
        "records": len(lk.records),
        "stored_in": lk.stored_in,
    }

