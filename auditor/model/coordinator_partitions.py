"""How many ``__transaction_state`` partitions each cluster of the input has, and how we know.

The broker maps a transactional id to its coordinator's partition with
``abs(hashCode) % partitionCount`` (``TransactionStateManager.partitionFor``, where the count is
the number of partitions the topic actually has: the broker reads it from the metadata once the
topic exists, the config ``transaction.state.log.num.partitions`` only before). So the count is
taken, in this order, from the user (``--partitions``), the KRaft metadata log in the input, the
``__transaction_state-K`` directories given (a lower bound), or Kafka's default. The coverage
(which coordinator partitions the input lacks) and the ``coordinator`` command both read it here.

Reads use pyarrow with filters (three small tables): no Spark session.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from auditor.model.clusters import cluster_key
from auditor.tables.source import arrow_dataset

TXN_TOPIC = "__transaction_state"
DEFAULT_PARTITIONS = 50  # transaction.state.log.num.partitions default


@dataclass
class PartitionCount:
    """How many ``__transaction_state`` partitions a cluster has, and how we know."""

    count: int
    source: str  # "--partitions", "metadata", "log dirs", "default"
    detail: str


def _dataset(tables_dir: Path, name: str):
    return arrow_dataset(tables_dir, name)


def _metadata_counts(tables_dir: Path) -> dict[str | None, int]:
    """Per cluster: partitions of the live ``__transaction_state`` topic per the
    KRaft metadata log (TopicRecord names it, PartitionRecords number it)."""
    import pyarrow.compute as pc

    d = _dataset(tables_dir, "metadata_records")
    if d is None:
        return {}
    want = ["cluster_id", "log_dir", "record_type", "topic_name", "topic_id", "partition_id"]
    kinds = pc.field("record_type").isin(["TOPIC_RECORD", "PARTITION_RECORD", "REMOVE_TOPIC_RECORD"])
    rows = d.to_table(columns=want, filter=kinds).to_pylist()
    topic_ids: dict[str | None, set[str]] = {}
    removed: dict[str | None, set[str]] = {}
    parts: dict[tuple[str | None, str], set[int]] = {}
    for r in rows:
        c = cluster_key(r["cluster_id"], r["log_dir"])
        if r["record_type"] == "TOPIC_RECORD" and r["topic_name"] == TXN_TOPIC and r["topic_id"]:
            topic_ids.setdefault(c, set()).add(r["topic_id"])
        elif r["record_type"] == "REMOVE_TOPIC_RECORD" and r["topic_id"]:
            removed.setdefault(c, set()).add(r["topic_id"])
        elif r["record_type"] == "PARTITION_RECORD" and r["topic_id"] and r["partition_id"] is not None:
            parts.setdefault((c, r["topic_id"]), set()).add(r["partition_id"])
    out: dict[str | None, int] = {}
    for c, ids in topic_ids.items():
        live = (ids - removed.get(c, set())) or ids
        n = max((len(parts.get((c, t), ())) for t in live), default=0)
        if n:
            out[c] = n
    return out


def _logdir_counts(tables_dir: Path) -> dict[str | None, int]:
    """Per cluster: highest ``__transaction_state-K`` directory found + 1 (a lower
    bound: a broker replicates only some partitions, and not every broker may
    have been dumped)."""
    import pyarrow.compute as pc

    d = _dataset(tables_dir, "files")
    if d is None:
        return {}
    rows = d.to_table(columns=["cluster_id", "log_dir", "partition"],
                      filter=(pc.field("topic") == TXN_TOPIC) & pc.field("partition").is_valid()).to_pylist()
    out: dict[str | None, int] = {}
    for r in rows:
        c = cluster_key(r["cluster_id"], r["log_dir"])
        out[c] = max(out.get(c, 0), r["partition"] + 1)
    return out


def partition_counts(tables_dir: str | Path, option: int | None) -> tuple[dict[str | None, PartitionCount], PartitionCount]:
    """Partition count per cluster, plus the one used for a cluster the dump says nothing about.

    Precedence: ``--partitions``; the metadata log; the log dirs; Kafka's default (50).
    """
    if option is not None:
        pc_ = PartitionCount(option, "--partitions", "given with --partitions")
        return {}, pc_
    root = Path(tables_dir)
    out: dict[str | None, PartitionCount] = {}
    for c, n in _logdir_counts(root).items():
        out[c] = PartitionCount(n, "log dirs", f"highest {TXN_TOPIC}-K directory in the dump + 1 (a lower bound "
                                               "if some brokers were not dumped)")
    for c, n in _metadata_counts(root).items():
        out[c] = PartitionCount(n, "metadata", f"PartitionRecords of {TXN_TOPIC} in the metadata log")
    default = PartitionCount(DEFAULT_PARTITIONS, "default",
                             "transaction.state.log.num.partitions default (no metadata or log dirs of the topic)")
    return out, default
