"""An oracle for one property of every report: no abort command for a transaction the coordinator
decided to COMMIT (aborting it tears the transaction: its other partitions keep the records, the
aborted partition loses them for ``read_committed`` consumers).

Written apart from the model (:mod:`auditor.model.decisions`), over the raw ingest tables with
pyarrow, and stricter where it can afford to be: an abort command at (partition, producer id, first
offset) is forbidden when a ``PrepareCommit`` record of the producer id lists the partition with an
epoch at or above the open data's and no COMMIT marker of the producer with that epoch, written
since the transaction started, sits on the partition before the data (that marker would make the
data a write after the decision -- a late write, which the abort rightly closes).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds


def _rows(tables: Path, name: str, columns: list[str], where=None) -> list[dict]:
    d = tables / name
    if not d.exists():
        return []
    return ds.dataset(str(d), format="parquet").to_table(columns=columns, filter=where).to_pylist()


def abort_targets(findings: list[dict]) -> set[tuple]:
    """(cluster, topic, partition, producer id, first offset) of every finding whose commands abort."""
    out = set()
    for f in findings:
        for c in f.get("remediation_commands") or []:
            text = c["command"] if isinstance(c, dict) else str(c)
            if " abort " in f" {text} " and f.get("producer_id") is not None:
                out.add((f["cluster_id"], f["topic"], f["partition"], f["producer_id"], f["first_offset"]))
    return out


def commit_decided(tables: Path, target: tuple) -> str | None:
    """Why an abort of ``target`` would tear a committed transaction, or None."""
    import pyarrow.compute as pc

    cluster, topic, partition, pid, first = target
    batches = _rows(tables, "batches", ["topic", "partition", "base_offset", "producer_epoch", "is_control",
                                        "control_type", "max_timestamp", "source"],
                    (pc.field("cluster_id") == cluster) & (pc.field("producer_id") == pid))
    mine = [b for b in batches if (b["topic"], b["partition"]) == (topic, partition) and b["source"] == "segment"]
    data = [b["producer_epoch"] for b in mine if not b["is_control"] and b["base_offset"] >= first]
    if not data:
        return None
    epoch = max(data)
    commits = [b for b in mine if b["is_control"] and b["control_type"] == "COMMIT" and b["base_offset"] < first]
    records = _rows(tables, "transaction_log", ["state", "producer_id", "producer_epoch", "topic_partitions",
                                                "start_timestamp_ms", "last_update_timestamp_ms", "offset"],
                    (pc.field("cluster_id") == cluster) & (pc.field("record_type") == "transaction"))
    for r in records:
        listed = any((tp["topic"], tp["partition"]) == (topic, partition) for tp in r["topic_partitions"] or [])
        if r["state"] != "PrepareCommit" or r["producer_id"] != pid or not listed or r["producer_epoch"] < epoch:
            continue
        since = r["start_timestamp_ms"] if (r["start_timestamp_ms"] or -1) >= 0 else r["last_update_timestamp_ms"]
        if not any(m["producer_epoch"] == r["producer_epoch"] and m["max_timestamp"] >= since for m in commits):
            return (f"PrepareCommit at __transaction_state offset {r['offset']} (epoch {r['producer_epoch']}) lists "
                    f"{topic}-{partition}, whose open data from offset {first} has epoch {epoch} and no COMMIT marker "
                    f"of that decision before it")
    return None


def torn_by_advice(tables: Path, findings: list[dict]) -> list[str]:
    """Every abort the findings advise that would tear a committed transaction, with why."""
    return [f"{t}: {why}" for t in sorted(abort_targets(findings)) if (why := commit_decided(tables, t))]
