"""Hand-built ingest tables for rule tests.

Rows are given as plain dicts with only the columns a test cares about; every
other column of the table's real schema (``auditor.ingest.tables.TABLES``) is
filled with a neutral default, and every table of the catalog is written (empty
when unused), with the ``files`` inventory and an ``_ingest.json`` manifest,
exactly as ``ingest`` lays them out.

Rows go to the cluster ``self.cluster`` (``test-cluster`` unless set): the rule
cases (``tests/rule_cases.py``) put each case in a cluster of its own. The
method names and keyword arguments are what a case file's ``input`` calls.
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
    def __init__(self, root: Path, broker_id: int = 1, cluster: str = CLUSTER, without_broker_ids: bool = False) -> None:
        """``without_broker_ids``: every row read from a log dir has no broker id (its log dir stays
        ``/data/broker-<id>``), as when the log dirs were handed over without their ``meta.properties``;
        the broker ids the records themselves carry (a producer-id block's grantee) stay."""
        self.root = Path(root)
        self.broker_id = broker_id
        self.cluster = cluster
        self.without_broker_ids = without_broker_ids
        self.rows: dict[str, list[dict]] = {name: [] for name in (*TABLES, "files")}
        self.not_given_rows: list[dict] = []

    def _ctx(self, topic: str | None, partition: int | None, broker_id: int | None = None,
             log_dir: str | None = None) -> dict:
        """The rows' context: broker ``broker_id``'s log dir ``/data/broker-<id>``, or ``log_dir`` (a
        broker's second log dir, e.g. one holding a ``-future`` replica)."""
        b = self.broker_id if broker_id is None else broker_id
        d = log_dir or f"/data/broker-{b}"
        return {"cluster_id": self.cluster, "broker_id": None if self.without_broker_ids else b,
                "log_dir": d, "topic": topic,
                "partition": partition, "file": f"{d}/{topic}-{partition}/00000000000000000000.log"}

    # -- batches -------------------------------------------------------------
    def batch(self, topic: str, partition: int, base_offset: int, count: int = 1, *, producer_id: int = -1,
              producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False, ts: int | None = None,
              broker_id: int | None = None, records: int | None = None, crc: int = 0,
              segment_base_offset: int = 0, log_dir: str | None = None) -> "TableSet":
        last_seq = -1 if base_sequence < 0 else (base_sequence + count - 1) % (2**31)
        self.rows["batches"].append({
            **self._ctx(topic, partition, broker_id, log_dir), "segment_base_offset": segment_base_offset, "source": "segment",
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
               commit: bool, coordinator_epoch: int = 0, ts: int | None = None, broker_id: int | None = None,
               segment_base_offset: int = 0, log_dir: str | None = None) -> "TableSet":
        self.batch(topic, partition, offset, 1, producer_id=producer_id, producer_epoch=producer_epoch,
                   transactional=True, ts=ts, broker_id=broker_id, segment_base_offset=segment_base_offset,
                   log_dir=log_dir)
        row = self.rows["batches"][-1]
        row.update(is_control=True, attributes=0x30, control_type="COMMIT" if commit else "ABORT",
                   coordinator_epoch=coordinator_epoch)
        return self

    # -- coordinator ---------------------------------------------------------
    def txn(self, transactional_id: str, offset: int, state: str, producer_id: int, producer_epoch: int = 0, *,
            partitions: list[tuple[str, int]] | None = None, timeout_ms: int = 60_000, start_ms: int = -1,
            updated_ms: int | None = None, txn_partition: int = 0, previous_producer_id: int = -1,
            next_producer_id: int = -1, client_transaction_version: int | None = None,
            broker_id: int | None = None) -> "TableSet":
        states = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"]
        self.rows["transaction_log"].append({
            **self._ctx("__transaction_state", txn_partition, broker_id), "offset": offset, "timestamp": updated_ms or T0 + offset,
            "batch_position": offset * 100, "batch_producer_id": -1, "batch_producer_epoch": -1, "batch_is_transactional": False,
            "record_type": "transaction", "key_version": 0, "transactional_id": transactional_id, "value_version": 0,
            "is_tombstone": False, "producer_id": producer_id, "previous_producer_id": previous_producer_id,
            "next_producer_id": next_producer_id, "producer_epoch": producer_epoch, "transaction_timeout_ms": timeout_ms,
            "state_id": states.index(state), "state": state,
            "topic_partitions": None if partitions is None else [{"topic": t, "partition": p} for t, p in partitions],
            "last_update_timestamp_ms": updated_ms or T0 + offset, "start_timestamp_ms": start_ms,
            "client_transaction_version": client_transaction_version, "unknown_tags_json": None,
        })
        return self

    def tombstone(self, transactional_id: str, offset: int, *, txn_partition: int = 0,
                  broker_id: int | None = None) -> "TableSet":
        """The tombstone expiry writes for a transactional id (no value)."""
        self.txn(transactional_id, offset, "Empty", 0, txn_partition=txn_partition, broker_id=broker_id)
        self.rows["transaction_log"][-1].update(
            is_tombstone=True, value_version=None, producer_id=None, previous_producer_id=None, next_producer_id=None,
            producer_epoch=None, transaction_timeout_ms=None, state_id=None, state=None, topic_partitions=None,
            last_update_timestamp_ms=None, start_timestamp_ms=None)
        return self

    def checkpoint(self, kind: str, topic: str, partition: int, offset: int, broker_id: int | None = None) -> "TableSet":
        self.rows["checkpoints"].append({**self._ctx(None, None, broker_id), "topic": topic, "partition": partition,
                                         "checkpoint_kind": kind, "offset": offset, "line": 3})
        return self

    # -- side files ----------------------------------------------------------
    def snapshot_entry(self, topic: str, partition: int, snapshot_offset: int, entry_index: int, producer_id: int,
                       producer_epoch: int, *, last_offset: int = -1, offset_delta: int = 0, last_sequence: int = -1,
                       current_txn_first_offset: int | None = None, coordinator_epoch: int = -1,
                       last_timestamp: int = T0, broker_id: int | None = None) -> "TableSet":
        """One producer entry of ``<snapshot_offset>.snapshot`` (first offset and sequence derived from the delta)."""
        return self.add("producer_snapshots", topic, partition, broker_id=broker_id, snapshot_offset=snapshot_offset,
                        entry_index=entry_index, producer_id=producer_id, producer_epoch=producer_epoch,
                        last_sequence=last_sequence, first_sequence=-1 if last_sequence < 0 else last_sequence - offset_delta,
                        last_offset=last_offset, offset_delta=offset_delta,
                        first_offset=-1 if last_offset < 0 else last_offset - offset_delta, last_timestamp=last_timestamp,
                        coordinator_epoch=coordinator_epoch, current_txn_first_offset=current_txn_first_offset,
                        crc_valid=True)

    def txnindex_entry(self, topic: str, partition: int, entry_index: int, producer_id: int, first_offset: int,
                       last_offset: int, *, in_order: bool = True, segment_base_offset: int = 0,
                       last_stable_offset: int | None = None, broker_id: int | None = None) -> "TableSet":
        """One entry of a ``.txnindex`` (the LSO defaults to the marker offset + 1)."""
        lso = last_offset + 1 if last_stable_offset is None else last_stable_offset
        return self.add("aborted_txns", topic, partition, broker_id=broker_id, entry_index=entry_index, version=0,
                        producer_id=producer_id, first_offset=first_offset, last_offset=last_offset,
                        last_stable_offset=lso, in_order=in_order, segment_base_offset=segment_base_offset)

    def pid_block(self, next_producer_id: int, *, offset: int | None = None, granted_to: int = 1,
                  source: str = "log", block_start: int | None = None, block_end: int | None = None,
                  broker_epoch: int = 5, ts: int | None = None, broker_id: int | None = None,
                  log_dir: str | None = None) -> "TableSet":
        """A producer-id grant: a ProducerIdsRecord of ``__cluster_metadata`` (``source`` log or
        snapshot, read from broker ``broker_id``'s metadata log, in ``log_dir``: by default the
        broker's one) or the ZooKeeper block (``zookeeper``); the block is the 1000 ids below
        ``next_producer_id`` unless given."""
        start = next_producer_id - 1000 if block_start is None else block_start
        end = next_producer_id - 1 if block_end is None else block_end
        ctx = self._table_ctx("producer_id_blocks", "__cluster_metadata", 0, broker_id)
        if log_dir is not None:
            ctx.update(log_dir=log_dir, file=f"{log_dir}/__cluster_metadata-0/00000000000000000000.log")
        self.rows["producer_id_blocks"].append({
            **ctx, "broker_id": granted_to,
            "broker_epoch": broker_epoch, "next_producer_id": next_producer_id, "block_start": start, "block_end": end,
            "source": source, "offset": offset,
            "timestamp": ts if ts is not None else (None if offset is None else T0 + offset)})
        return self

    def offset_commit(self, group_id: str, topic: str, partition: int, committed_offset: int, *, offset: int,
                      consumer_offsets_partition: int = 0, producer_id: int = -1, producer_epoch: int = -1,
                      transactional: bool = False, tombstone: bool = False, ts: int | None = None,
                      broker_id: int | None = None) -> "TableSet":
        """An offset commit record at ``offset`` of ``__consumer_offsets-<consumer_offsets_partition>``
        (a transactional one carries its producer); the batch holding it is added separately."""
        t = ts if ts is not None else T0 + offset
        self.rows["offset_commits"].append({
            **self._table_ctx("offset_commits", "__consumer_offsets", consumer_offsets_partition, broker_id),
            "offset": offset, "timestamp": t, "batch_producer_id": producer_id, "batch_producer_epoch": producer_epoch,
            "batch_is_transactional": transactional, "record_type": "offset_commit", "key_version": 1,
            "group_id": group_id, "topic": topic, "partition": partition, "is_tombstone": tombstone,
            "committed_offset": None if tombstone else committed_offset, "commit_timestamp_ms": t})
        return self

    def config(self, name: str, value: str, *, topic: str | None = None, broker: int | None = None,
               offset: int = 0) -> "TableSet":
        """A ConfigRecord of the metadata log: a topic's (``topic``), a broker's (``broker``) or the
        cluster-wide broker default (neither)."""
        kind, res = (2, topic) if topic is not None else (4, "" if broker is None else str(broker))
        return self.add("metadata_records", "__cluster_metadata", 0, offset=offset, timestamp=T0 + offset,
                        record_type="CONFIG_RECORD", config_resource_type=kind, config_resource_name=res,
                        config_name=name, config_value=value, source="log")

    def leader(self, topic: str, partition: int, leader: int, *, offset: int, ts: int | None = None,
               adding: list[int] | None = None) -> "TableSet":
        """A partition's leader in the metadata log: the topic's ``TopicRecord`` (with the first call for
        the topic) and a ``PartitionChangeRecord`` setting ``leader`` (-1: none) at ``offset``, appended
        at ``ts``; with ``adding``, the record sets the partition's adding replicas too (a reassignment)."""
        topic_id = f"id-{topic}"
        t = T0 + offset if ts is None else ts
        if not any(r.get("record_type") == "TOPIC_RECORD" and r.get("topic_name") == topic
                   and r.get("cluster_id") == self.cluster for r in self.rows["metadata_records"]):
            self.add("metadata_records", "__cluster_metadata", 0, offset=offset, timestamp=t, record_type="TOPIC_RECORD",
                     topic_name=topic, topic_id=topic_id, source="log")
        return self.add("metadata_records", "__cluster_metadata", 0, offset=offset, timestamp=t,
                        record_type="PARTITION_CHANGE_RECORD", topic_id=topic_id, partition_id=partition, leader=leader,
                        source="log", data_json=None if adding is None else json.dumps({"addingReplicas": adding}))

    def inventory_file(self, topic: str, partition: int, kind: str, base_offset: int,
                       broker_id: int | None = None, mtime_ms: int | None = None, log_dir: str | None = None,
                       future: bool = False) -> "TableSet":
        """A live ``files`` inventory row: a ``txn-index`` or ``producer-snapshot`` (an empty file
        that left no rows in its table), or the ``segment`` the partition's batches are in, last
        modified at ``mtime_ms`` when it was listed; with ``future``, in the partition's ``-future``
        directory (a move between the broker's log dirs: ``log_dir`` is the one it moves to)."""
        ctx = self._ctx(topic, partition, broker_id, log_dir)
        ext = {"txn-index": "txnindex", "producer-snapshot": "snapshot", "segment": "log"}[kind]
        size, status = (100, "ok") if kind == "segment" else (0, "empty")
        part_dir = f"{topic}-{partition}" + (".0123456789abcdef0123456789abcdef-future" if future else "")
        self.rows["files"].append({
            "path": f"{ctx['log_dir']}/{part_dir}/{base_offset:020d}.{ext}", "input_root": ctx["log_dir"],
            "log_dir": ctx["log_dir"], "cluster_id": ctx["cluster_id"], "broker_id": ctx["broker_id"], "topic": topic,
            "partition": partition, "dir_status": "future" if future else "live", "kind": kind, "file_status": "live", "base_offset": base_offset,
            "size": size, "mtime_ms": mtime_ms, "status": status, "problem_count": 0})
        return self

    def cleaner_checkpoint(self, broker_id: int | None = None) -> "TableSet":
        """The ``files`` row of the log dir's ``cleaner-offset-checkpoint``, empty: the log cleaner has
        never compacted a partition of it (``auditor.model.coverage``: compaction known)."""
        ctx = self._ctx(None, None, broker_id)
        self.rows["files"].append({
            "path": f"{ctx['log_dir']}/cleaner-offset-checkpoint", "input_root": ctx["log_dir"],
            "log_dir": ctx["log_dir"], "cluster_id": ctx["cluster_id"], "broker_id": ctx["broker_id"], "topic": None,
            "partition": None, "dir_status": "root", "kind": "cleaner-offset-checkpoint", "file_status": "live",
            "base_offset": None, "size": 0, "status": "empty", "problem_count": 0})
        return self

    def clean_shutdown(self, broker_id: int | None = None, log_dir: str | None = None) -> "TableSet":
        """The ``files`` row of the log dir's ``.kafka_cleanshutdown``: its broker stopped cleanly and did
        not start again (:mod:`auditor.model.moving`)."""
        ctx = self._ctx(None, None, broker_id, log_dir)
        self.rows["files"].append({
            "path": f"{ctx['log_dir']}/.kafka_cleanshutdown", "input_root": ctx["log_dir"], "log_dir": ctx["log_dir"],
            "cluster_id": ctx["cluster_id"], "broker_id": ctx["broker_id"], "topic": None, "partition": None,
            "dir_status": "root", "kind": "clean-shutdown", "file_status": "live", "base_offset": None, "size": 0,
            "status": "ok", "problem_count": 0})
        return self

    def not_given(self, topic: str, partition: int, *, before: int = 0, after: int = 0, between: int = 0,
                  next_not_given_offset: int | None = None, gap_from_offset: int | None = None,
                  gap_to_offset: int | None = None, broker_id: int | None = None) -> "TableSet":
        """The partition was given segment by segment: its directory had ``before`` / ``after`` /
        ``between`` live segments that were not (the ingest manifest's ``not_given``,
        :mod:`auditor.ingest.not_given`; the ones between span ``gap_from_offset`` to ``gap_to_offset``)."""
        ctx = self._ctx(topic, partition, broker_id)
        self.not_given_rows.append({
            "cluster_id": ctx["cluster_id"], "log_dir": ctx["log_dir"], "topic": topic, "partition": partition,
            "dir": f"{ctx['log_dir']}/{topic}-{partition}", "segments_in_dir": None, "segments_given": None,
            "before": before, "after": after, "between": between, "first_given_offset": None,
            "next_not_given_offset": next_not_given_offset, "gap_from_offset": gap_from_offset,
            "gap_to_offset": gap_to_offset})
        return self

    def remote_segment(self, topic: str, partition: int, start_offset: int, end_offset: int, *, segment_id: str,
                       offset: int, state: str = "COPY_SEGMENT_FINISHED", topic_id: str = "AAAAAAAAAAAAAAAAAAAAAA",
                       max_timestamp_ms: int = T0, size: int = 1024, broker_id: int | None = None) -> "TableSet":
        """Tiered storage: a RemoteLogSegmentMetadataRecord of ``topic``-``partition`` at ``offset`` of
        ``__remote_log_metadata-0`` (the state given; ``state`` other than COPY_SEGMENT_STARTED stands for
        the segment's latest update)."""
        from auditor.formats.remote_log_metadata import SEGMENT_STATES

        state_id = {v: k for k, v in SEGMENT_STATES.items()}[state]
        self.rows["remote_log_segments"].append({
            **self._table_ctx("remote_log_segments", "__remote_log_metadata", 0, broker_id), "offset": offset,
            "record_type": "RemoteLogSegmentMetadataRecord", "api_key": 0, "record_version": 0, "topic": topic,
            "topic_id": topic_id, "partition": partition, "segment_id": segment_id, "start_offset": start_offset,
            "end_offset": end_offset, "event_broker_id": 1, "max_timestamp_ms": max_timestamp_ms,
            "event_timestamp_ms": max_timestamp_ms, "segment_size_in_bytes": size, "state": state,
            "state_id": state_id, "txn_index_empty": False})
        return self

    def leader_epoch(self, topic: str, partition: int, leader_epoch: int, start_offset: int,
                     broker_id: int | None = None) -> "TableSet":
        """An entry of the replica's leader-epoch-checkpoint."""
        return self.add("leader_epochs", topic, partition, broker_id=broker_id, leader_epoch=leader_epoch,
                        start_offset=start_offset)

    def add(self, table: str, topic: str | None = None, partition: int | None = None, **cols) -> "TableSet":
        """Any other table: context + the given columns."""
        self.rows[table].append({**self._table_ctx(table, topic, partition, cols.pop("broker_id", None)), **cols})
        return self

    def _table_ctx(self, table: str, topic: str | None, partition: int | None, broker_id: int | None) -> dict:
        """The context columns under ``table``'s names for them (``log_topic``, ``log_broker_id``...)."""
        spec = TABLES[table]
        return {spec.context_name(k): v for k, v in self._ctx(topic, partition, broker_id).items()}

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
        files = [{f.name: r.get(f.name) for f in FILES_SCHEMA} for r in self.rows["files"]]
        pq.write_table(pa.Table.from_pylist(files, schema=FILES_SCHEMA), d / "part-00000.parquet")
        (self.root / "_ingest.json").write_text(json.dumps({"tables": counts, "not_given": self.not_given_rows}))
        return self.root
