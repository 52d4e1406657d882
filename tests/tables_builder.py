"""Hand-built ingest tables for rule tests.

Rows are given as plain dicts with only the columns a test cares about; every
other column of the table's real schema (``auditor.ingest.tables.TABLES``) is
filled with a neutral default, and every table of the catalog is written (empty
when unused), with an ``_ingest.json`` manifest, exactly as ``ingest`` lays them out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from auditor.ingest.inventory import FILES_SCHEMA
from auditor.ingest.tables import TABLES

T0 = 1_700_000_000_000
CLUSTER = "test-cluster"


class TableSet:
    def __init__(self, root: Path, broker_id: int = 1) -> None:
        self.root = Path(root)
        self.broker_id = broker_id
        self.rows: dict[str, list[dict]] = {name: [] for name in TABLES}

    def _ctx(self, topic: str | None, partition: int | None, broker_id: int | None = None) -> dict:
        b = self.broker_id if broker_id is None else broker_id
        return {"cluster_id": CLUSTER, "broker_id": b, "log_dir": f"/data/broker-{b}", "topic": topic,
                "partition": partition, "file": f"/data/broker-{b}/{topic}-{partition}/00000000000000000000.log"}

    # -- batches -------------------------------------------------------------
    def batch(self, topic: str, partition: int, base_offset: int, count: int = 1, *, producer_id: int = -1,
              producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False, ts: int | None = None,
              broker_id: int | None = None, records: int | None = None, crc: int = 0) -> "TableSet":
        last_seq = -1 if base_sequence < 0 else (base_sequence + count - 1) % (2**31)
        self.rows["batches"].append({
            **self._ctx(topic, partition, broker_id), "segment_base_offset": 0, "source": "segment",
            "position": base_offset * 100, "size": 100, "base_offset": base_offset, "last_offset": base_offset + count - 1,
            "last_offset_delta": count - 1, "partition_leader_epoch": 0, "magic": 2, "crc": crc, "crc_valid": True,
            "attributes": 0x10 if transactional else 0, "compression": "none", "timestamp_type": "CreateTime",
            "is_transactional": transactional, "is_control": False, "has_delete_horizon": False,
            "base_timestamp": ts if ts is not None else T0 + base_offset, "max_timestamp": ts if ts is not None else T0 + base_offset,
            "delete_horizon_ms": None, "producer_id": producer_id, "producer_epoch": producer_epoch,
            "base_sequence": base_sequence, "last_sequence": last_seq,
            "record_count": count if records is None else records, "control_type": None, "coordinator_epoch": None,
        })
        return self

    def marker(self, topic: str, partition: int, offset: int, producer_id: int, producer_epoch: int, *,
               commit: bool, coordinator_epoch: int = 0, ts: int | None = None, broker_id: int | None = None) -> "TableSet":
        self.batch(topic, partition, offset, 1, producer_id=producer_id, producer_epoch=producer_epoch,
                   transactional=True, ts=ts, broker_id=broker_id)
        row = self.rows["batches"][-1]
        row.update(is_control=True, attributes=0x30, control_type="COMMIT" if commit else "ABORT",
                   coordinator_epoch=coordinator_epoch)
        return self

    # -- coordinator ---------------------------------------------------------
    def txn(self, transactional_id: str, offset: int, state: str, producer_id: int, producer_epoch: int = 0, *,
            partitions: list[tuple[str, int]] | None = None, timeout_ms: int = 60_000, start_ms: int = -1,
            updated_ms: int | None = None, txn_partition: int = 0, previous_producer_id: int = -1,
            next_producer_id: int = -1) -> "TableSet":
        states = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"]
        self.rows["transaction_log"].append({
            **self._ctx("__transaction_state", txn_partition), "offset": offset, "timestamp": updated_ms or T0 + offset,
            "batch_position": offset * 100, "batch_producer_id": -1, "batch_producer_epoch": -1, "batch_is_transactional": False,
            "record_type": "transaction", "key_version": 0, "transactional_id": transactional_id, "value_version": 0,
            "is_tombstone": False, "producer_id": producer_id, "previous_producer_id": previous_producer_id,
            "next_producer_id": next_producer_id, "producer_epoch": producer_epoch, "transaction_timeout_ms": timeout_ms,
            "state_id": states.index(state), "state": state,
            "topic_partitions": None if partitions is None else [{"topic": t, "partition": p} for t, p in partitions],
            "last_update_timestamp_ms": updated_ms or T0 + offset, "start_timestamp_ms": start_ms,
            "client_transaction_version": None, "unknown_tags_json": None,
        })
        return self

    def checkpoint(self, kind: str, topic: str, partition: int, offset: int, broker_id: int | None = None) -> "TableSet":
        self.rows["checkpoints"].append({**self._ctx(None, None, broker_id), "topic": topic, "partition": partition,
                                         "checkpoint_kind": kind, "offset": offset, "line": 3})
        return self

    def add(self, table: str, topic: str | None = None, partition: int | None = None, **cols) -> "TableSet":
        """Any other table: context + the given columns."""
        spec = TABLES[table]
        ctx = {spec.context_name(k): v for k, v in self._ctx(topic, partition, cols.pop("broker_id", None)).items()}
        self.rows[table].append({**ctx, **cols})
        return self

    # -- output --------------------------------------------------------------
    def write(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        counts = {}
        for name, spec in TABLES.items():
            schema = spec.schema
            rows = [{f.name: r.get(f.name) for f in schema} for r in self.rows[name]]
            d = self.root / name
            d.mkdir(exist_ok=True)
            pq.write_table(pa.Table.from_pylist(rows, schema=schema), d / "part-00000.parquet")
            counts[name] = len(rows)
        d = self.root / "files"
        d.mkdir(exist_ok=True)
        pq.write_table(FILES_SCHEMA.empty_table(), d / "part-00000.parquet")
        (self.root / "_ingest.json").write_text(json.dumps({"tables": counts}))
        return self.root
