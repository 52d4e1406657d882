"""The text of Kafka's ``kafka-dump-log.sh`` (``DumpLogSegments``) read back as batches.

Support bundles and incident tickets often carry the tool's output instead of the
segments. What the text holds is what the tool printed, line by line, and each
version prints its own layout (taken from the tool's print code):

* every dumped file starts with ``Dumping <path>`` (``DumpLogSegments.main``, all
  versions), followed by ``Starting offset: N`` (2.8, ``dumpLog``) or ``Log starting
  offset: N`` (3.x/4.x);
* one line per batch of a magic-2 segment (``DumpLogSegments.dumpLog`` ->
  ``printBatchLevel``): ``baseOffset lastOffset count baseSequence lastSequence
  producerId producerEpoch partitionLeaderEpoch isTransactional isControl
  [deleteHorizonMs, 3.x+] position <timestampType>: maxTimestamp size magic
  compresscodec crc isvalid``; ``compresscodec`` is ``CompressionType.name`` in 2.8
  (``NONE``, ``GZIP``) and the codec's lower-case name from 3.0 on;
* a legacy (magic 0/1) entry is ``offset position <timestampType>: timestamp size
  magic compresscodec crc isvalid`` (its ``offset`` is the entry's own, the last inner
  offset of a compressed wrapper: ``AbstractLegacyRecordBatch.lastOffset``);
* with ``--deep-iteration`` (implied by ``--print-data-log`` and the decoders) one
  ``| offset: ...`` line per record (``dumpBatchRecords`` / ``printRecordMetadata`` in
  4.x): 3.x/4.x print ``offset <timestampType>: ts keySize valueSize`` then ``sequence
  headerKeys`` (magic 2) or ``isValid crc`` (legacy; 3.x closes it with a stray ``}``); 2.8 prints ``offset isValid crc keySize
  valueSize <timestampType>: ts baseOffset ... position`` and the same tail. A
  control record adds ``endTxnMarker: COMMIT|ABORT coordinatorEpoch: N``
  (``EndTransactionMarker``), data records ``key: ... payload: ...`` with
  ``--print-data-log``;
* ``__transaction_state`` records printed through ``--transaction-log-decoder``:
  4.x prints the generated ``TransactionLogKey``/``TransactionLogValue`` JSON
  (``{"type"|"version": ..., "data": {...}}``, ``TransactionLogMessageParser``, a
  ``CoordinatorRecordMessageParser``, Kafka 4.3.1), 2.8
  and 3.x ``transaction_metadata::transactionalId=ID`` and
  ``producerId:P,producerEpoch:E,state=S,partitions=[t-0,...],txnLastUpdateTimestamp=T,txnTimeoutMs=M``
  (``TransactionLogMessageParser`` in ``kafka.tools.DumpLogSegments``, 2.8.2 and 3.5.2,
  which prints no start timestamp); tombstones print ``<DELETE>``. 4.3.1's decoder throws on
  a record of another topic, so ``__transaction_state`` is best dumped in a run of its own;
* ``__cluster_metadata`` records printed through ``--cluster-metadata-decoder`` (3.x/4.x
  ``ClusterMetadataLogMessageParser``): the generated record's JSON with its type name. A KRaft
  snapshot (``<end offset>-<epoch>.checkpoint``) is dumped the same way after the line
  ``Snapshot end offset: N, epoch: E`` (``DumpLogSegments.dumpLog`` reads it with
  ``FileRawSnapshotReader``); its ``SnapshotHeader``/``SnapshotFooter`` control records print
  their JSON after the type name.
  Raw payloads (``--print-data-log`` without the decoder) are not decoded.

What the text cannot carry — record bytes, the batch's first timestamp, attributes
of a 2.8 batch (no delete-horizon flag), markers' types without
``--deep-iteration`` — is left null; the ingest says so in the inventory and the
model's coverage (:func:`auditor.model.coverage.text_dump_lacks`). Reading is line
streaming: at most one line (:data:`MAX_LINE` bytes) and one batch's first record are
held at a time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

HEADER = b"Dumping "
MAX_LINE = 16 * 1024 * 1024  # a printed record (--print-data-log) may be large; a longer line is cut and reported
SNIFF_BYTES = 64 * 1024
# lines of one block not in the tool's layout before the rest of the block is given up (another tool's
# text after a ``Dumping`` line must not become one problem row per line)
MAX_BAD_LINES = 100
# logger lines the JVM writes next to the dump when stderr is captured with it (2>&1)
_NOISE = (b"SLF4J:", b"log4j:", b"WARNING:", b"[")

_TS = r"(?P<ts_type>CreateTime|LogAppendTime|NoTimestampType): (?P<ts>-?\d+)"
_BATCH_V2 = re.compile(
    r"baseOffset: (?P<base>-?\d+) lastOffset: (?P<last>-?\d+) count: (?P<count>-?\d+|null) "
    r"baseSequence: (?P<bseq>-?\d+) lastSequence: (?P<lseq>-?\d+) producerId: (?P<pid>-?\d+) "
    r"producerEpoch: (?P<epoch>-?\d+) partitionLeaderEpoch: (?P<ple>-?\d+) isTransactional: (?P<txn>true|false) "
    r"isControl: (?P<ctl>true|false)(?: deleteHorizonMs: (?:OptionalLong\[(?P<dh>-?\d+)\]|(?P<dh_empty>OptionalLong\.empty)))? "
    r"position: (?P<pos>\d+) " + _TS + r" size: (?P<size>\d+) magic: (?P<magic>\d+) "
    r"compresscodec: (?P<codec>\w+) crc: (?P<crc>\d+) isvalid: (?P<valid>true|false)$")
_BATCH_LEGACY = re.compile(
    r"offset: (?P<last>-?\d+) position: (?P<pos>\d+) " + _TS + r" size: (?P<size>\d+) magic: (?P<magic>[01]) "
    r"compresscodec: (?P<codec>\w+) crc: (?P<crc>\d+) isvalid: (?P<valid>true|false)$")
_RECORD = re.compile(r"^\| offset: (?P<offset>-?\d+) ")
_RECORD_TS = re.compile(_TS)
_RECORD_SIZES = re.compile(r"keySize: (?P<k>-?\d+) valueSize: (?P<v>-?\d+)")
_RECORD_SEQ = re.compile(r" sequence: (?P<seq>-?\d+) headerKeys: \[(?P<hk>.*?)\](?= |$)")
_MARKER = re.compile(r" endTxnMarker: (?P<type>COMMIT|ABORT) coordinatorEpoch: (?P<ce>-?\d+)")
_CONTROL_OTHER = re.compile(r" (?:controlType: (?P<ct>\S+)|(?P<kraft>LeaderChange|SnapshotHeader|SnapshotFooter|KRaftVersion|KRaftVoters): )")
# the header line of a segment (2.8 ``Starting offset``, 3.x/4.x ``Log starting offset``) or, for a KRaft
# ``.checkpoint``, ``Snapshot end offset: N, epoch: E`` (DumpLogSegments.dumpLog, 3.x/4.x)
_START = re.compile(r"^(?:(?:Log s|S)tarting offset: -?\d+|Snapshot end offset: -?\d+, epoch: -?\d+)$")
# dumpLog's last line for a segment whose tail holds no valid batch (a torn write, a preallocated zero tail)
_INVALID_TAIL = re.compile(r"^Found (?P<n>\d+) invalid bytes at the end of (?P<name>.+)$")
_TXN_KEY_V3 = re.compile(r"^transaction_metadata::transactionalId=(?P<id>.*)$")
_TXN_VALUE_V3 = re.compile(
    r"^producerId:(?P<pid>-?\d+),producerEpoch:(?P<epoch>-?\d+),state=(?P<state>\w+),partitions=\[(?P<parts>.*)\],"
    r"txnLastUpdateTimestamp=(?P<upd>-?\d+),txnTimeoutMs=(?P<timeout>-?\d+)$")
_TOPIC_PART = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
# TransactionState names -> ids (TransactionState.java, as txnlog decodes them)
_STATE_IDS = {"Empty": 0, "Ongoing": 1, "PrepareCommit": 2, "PrepareAbort": 3, "CompleteCommit": 4,
              "CompleteAbort": 5, "Dead": 6, "PrepareEpochFence": 7}


def sniff(head: bytes) -> bool:
    """True when the first non-empty line is ``Dumping <path>``: the first thing
    ``DumpLogSegments`` prints for every file, whatever the version or options."""
    return head.lstrip(b" \t\r\n").startswith(HEADER)


@dataclass
class Section:
    """One ``Dumping <path>`` block of a text: the dumped file and where its lines are."""

    dumped_path: str
    start: int  # byte position of the header line
    end: int  # byte position after the section's last line
    first_line: int  # 1-based line number of the header
    batch_lines: int = 0
    record_lines: int = 0  # ``| offset:`` lines: the dump was taken with --deep-iteration
    control_batches: int = 0
    # topic ids the block's records name (``--cluster-metadata-decoder``'s TopicRecord and
    # PartitionRecord JSON): random per topic, so two texts naming one are of one cluster
    topic_ids: set = field(default_factory=set)


def _lines(f: BinaryIO, start: int, end: int | None) -> Iterator[tuple[int, bytes, bool]]:
    """(position, line without its end, complete) from ``start`` to ``end``; a line
    longer than :data:`MAX_LINE` is returned cut (``complete`` False) and the rest
    skipped, a last line without a newline too (a text cut mid-line)."""
    f.seek(start)
    pos = start
    while end is None or pos < end:
        line = f.readline(MAX_LINE + 1)
        if not line:
            return
        n = len(line)
        complete = line.endswith(b"\n")
        if not complete and n > MAX_LINE:
            while True:  # skip the rest of an over-long line in bounded reads
                more = f.readline(MAX_LINE)
                n += len(more)
                if not more or more.endswith(b"\n"):
                    break
        yield pos, line[:MAX_LINE].rstrip(b"\r\n"), complete
        pos += n


_TOPIC_ID = re.compile(rb'"topicId":"([A-Za-z0-9_-]{22})"')


def sections(f: BinaryIO, size: int | None = None) -> Iterator[Section]:
    """The ``Dumping`` blocks of a text, with what kind of lines each holds (one pass)."""
    cur: Section | None = None
    pos = 0
    for lineno, (pos, line, _complete) in enumerate(_lines(f, 0, size), start=1):
        if line.startswith(HEADER):
            if cur is not None:
                cur.end = pos
                yield cur
            cur = Section(line[len(HEADER):].decode("utf-8", "replace").strip(), pos, -1, lineno)
        elif cur is None:
            continue
        elif line.startswith(b"| "):
            cur.record_lines += 1
            if b'"topicId":"' in line:
                cur.topic_ids.update(m.decode() for m in _TOPIC_ID.findall(line))
        elif line.startswith((b"baseOffset: ", b"offset: ")):
            cur.batch_lines += 1
            if b" isControl: true " in line:
                cur.control_batches += 1
    if cur is not None:
        f.seek(0, 2)
        cur.end = f.tell() if size is None else size
        yield cur


@dataclass
class TextProblem:
    """A line the parser could not read: kind, byte position in the text, message."""

    kind: str
    position: int
    message: str
    in_segment: bool = False  # the position is a byte of the dumped segment (the tool's own report), not of the text


@dataclass
class TextRecord:
    """One ``| offset:`` line, with the batch it belongs to."""

    batch: dict
    offset: int
    timestamp: int | None
    key_size: int | None
    value_size: int | None
    sequence: int | None
    header_keys: str | None
    tail: str  # what follows the fixed fields: key/payload, marker or control record
    control_type: str | None = None
    coordinator_epoch: int | None = None
    position: int = 0


@dataclass
class _Pending:
    row: dict
    first: TextRecord | None = None
    count: int = 0


def _codec(name: str) -> str:
    # 2.8 prints CompressionType.name (NONE, GZIP, ...), 3.x/4.x the lower-case codec name
    return name.lower()


def _batch_row(m: re.Match, legacy: bool) -> dict:
    g = m.groupdict()
    last = int(g["last"])
    row = {
        "position": int(g["pos"]), "size": int(g["size"]), "magic": int(g["magic"]), "crc": int(g["crc"]),
        "crc_valid": g["valid"] == "true", "compression": _codec(g["codec"]), "timestamp_type": g["ts_type"],
        "max_timestamp": int(g["ts"]), "base_timestamp": None, "last_offset": last,
        "control_type": None, "coordinator_epoch": None,
    }
    if legacy:
        # AbstractLegacyRecordBatch: no producer fields (-1), no offset delta, never transactional or control
        row.update(base_offset=last if row["compression"] == "none" else None,
                   record_count=1 if row["compression"] == "none" else None,
                   last_offset_delta=0, partition_leader_epoch=-1, attributes=None, is_transactional=False,
                   is_control=False, has_delete_horizon=False, delete_horizon_ms=None, producer_id=-1,
                   producer_epoch=-1, base_sequence=-1, last_sequence=-1)
        if row["compression"] == "none":
            row["base_timestamp"] = row["max_timestamp"]
        return row
    base = int(g["base"])
    txn, ctl = g["txn"] == "true", g["ctl"] == "true"
    printed = g["dh"] is not None or g["dh_empty"] is not None  # 3.x+: the delete-horizon flag is shown
    row.update(base_offset=base, last_offset_delta=last - base, partition_leader_epoch=int(g["ple"]),
               is_transactional=txn, is_control=ctl,
               has_delete_horizon=(g["dh"] is not None) if printed else None,
               delete_horizon_ms=int(g["dh"]) if g["dh"] is not None else None,
               producer_id=int(g["pid"]), producer_epoch=int(g["epoch"]), base_sequence=int(g["bseq"]),
               last_sequence=int(g["lseq"]), record_count=None if g["count"] == "null" else int(g["count"]))
    # DefaultRecordBatch attributes: codec | timestampType << 3 | transactional << 4 | control << 5 | deleteHorizon << 6
    codec_id = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}.get(row["compression"])
    if printed and codec_id is not None:
        row["attributes"] = (codec_id | (8 if g["ts_type"] == "LogAppendTime" else 0) | (16 if txn else 0)
                             | (32 if ctl else 0) | (64 if row["has_delete_horizon"] else 0))
    else:
        row["attributes"] = None
    return row


def _record(line: str, batch: dict, pos: int) -> TextRecord | None:
    m = _RECORD.match(line)
    if not m:
        return None
    # the fixed fields end where the printed data or control record starts
    cut = len(line)
    for tag in (" endTxnMarker: ", " key: ", " payload: ", " controlType: ", " LeaderChange: ", " SnapshotHeader: ",
                " SnapshotFooter: ", " KRaftVersion: ", " KRaftVoters: "):
        i = line.find(tag)
        if 0 <= i < cut:
            cut = i
    head, tail = line[:cut], line[cut:]
    ts = _RECORD_TS.search(head)
    sizes = _RECORD_SIZES.search(head)
    if not sizes or not ts:
        return None
    seq = _RECORD_SEQ.search(head)
    rec = TextRecord(batch, int(m.group("offset")), int(ts.group("ts")), int(sizes.group("k")), int(sizes.group("v")),
                     int(seq.group("seq")) if seq else None, seq.group("hk") if seq else None, tail, position=pos)
    mk = _MARKER.match(tail)
    if mk:
        rec.control_type, rec.coordinator_epoch = mk.group("type"), int(mk.group("ce"))
    else:
        other = _CONTROL_OTHER.match(tail)
        if other:
            rec.control_type = _control_name(other.group("kraft"), other.group("ct"))
    return rec


# 3.x/4.x print KRaft control records by their message name (DumpLogSegments.dumpBatchRecords)
_KRAFT_NAMES = {"LeaderChange": 2, "SnapshotHeader": 3, "SnapshotFooter": 4, "KRaftVersion": 5, "KRaftVoters": 6}
_CONTROL_ID = re.compile(r"^\w*\((?P<id>-?\d+)\)$")


def _control_name(kraft: str | None, printed: str | None) -> str | None:
    """The ``ControlRecordType`` name the segment decoder gives (:data:`auditor.formats.records.CONTROL_TYPES`)
    from what the tool printed: a KRaft message name, or ``controlType: NAME(id)`` — 2.8 names type 2
    QUORUM_REASSIGNMENT, which later versions call LEADER_CHANGE: the id decides."""
    from auditor.formats.records import CONTROL_TYPES

    type_id = _KRAFT_NAMES.get(kraft or "")
    if type_id is None and printed:
        m = _CONTROL_ID.match(printed)
        if m is None:
            return printed
        type_id = int(m.group("id"))
    return CONTROL_TYPES.get(type_id, f"UNKNOWN({type_id})") if type_id is not None else None


def iter_text(f: BinaryIO, start: int, end: int | None) -> Iterator["dict | TextRecord | TextProblem"]:
    """Batch rows (dicts of the ``batches`` columns the text holds), records and problems
    of one section (``start``..``end``: its header line first). A batch row comes out
    after its record lines: a legacy wrapper's first offset, count and first timestamp
    and a control batch's marker are read from them."""
    pending: _Pending | None = None
    bad = 0

    def close() -> Iterator[dict]:
        if pending is None:
            return
        row = pending.row
        if pending.first is not None:
            first = pending.first
            if row["magic"] < 2 and row["base_offset"] is None:
                # DumpLogSegments' deep iteration prints a wrapper's inner messages (the first offset and count
                # Kafka reads: AbstractLegacyRecordBatch.baseOffset / iterator)
                row.update(base_offset=first.offset, record_count=pending.count, base_timestamp=first.timestamp)
            if row["is_control"] and row["magic"] == 2:
                row.update(control_type=first.control_type, coordinator_epoch=first.coordinator_epoch)
        yield row

    for pos, raw, complete in _lines(f, start, end):
        if bad >= MAX_BAD_LINES:
            yield TextProblem("corrupt", pos, f"{MAX_BAD_LINES} lines of this block are not DumpLogSegments output: "
                                              "the rest of the block is not read")
            break
        if not complete:
            yield TextProblem("truncated" if len(raw) < MAX_LINE else "bad-length", pos,
                              "line cut off (the text ends mid-line)" if len(raw) < MAX_LINE
                              else f"line longer than {MAX_LINE} bytes: skipped")
            continue
        if not raw.strip() or raw.startswith(_NOISE):
            continue
        line = raw.decode("utf-8", "replace")
        if raw.startswith(HEADER):
            continue
        if line.startswith("| "):
            rec = _record(line, pending.row if pending else {}, pos) if pending is not None else None
            if rec is None:
                bad += 1
                yield TextProblem("corrupt", pos, "record line not in DumpLogSegments' layout" if pending is not None
                                  else "record line before any batch line")
                continue
            if pending.first is None:
                pending.first = rec
            pending.count += 1
            yield rec
            continue
        m = _BATCH_V2.match(line)
        legacy = False
        if m is None:
            m = _BATCH_LEGACY.match(line)
            legacy = m is not None
        if m is not None:
            yield from close()
            pending = _Pending(_batch_row(m, legacy))
            continue
        if _START.match(line):
            continue
        tail = _INVALID_TAIL.match(line)
        if tail is not None:
            # where the segment decoder reports a torn or zero-filled tail: after the last valid batch
            end_of_valid = pending.row["position"] + pending.row["size"] if pending is not None else 0
            yield TextProblem("truncated", end_of_valid, f"the dump reports {tail.group('n')} invalid bytes at the end "
                              f"of the segment, from byte {end_of_valid}", in_segment=True)
            continue
        bad += 1
        yield TextProblem("corrupt", pos, "line not in DumpLogSegments' layout")
    yield from close()


# -- __transaction_state records as the tool's --transaction-log-decoder prints them -----------------

def _split_data(tail: str) -> tuple[str | None, str | None]:
    """(key, payload) texts of a record line's tail (`` key: K payload: P``)."""
    key = payload = None
    i = tail.find(" payload: ")
    if i >= 0:
        payload = tail[i + len(" payload: "):]
        head = tail[:i]
    else:
        head = tail
    if head.startswith(" key: "):
        key = head[len(" key: "):]
    return key, payload


def decode_txn_text(tail: str) -> dict | None:
    """A ``transaction_log`` row (:mod:`auditor.formats.txnlog` columns) from a decoded
    record's printed key and payload, or None when they were printed raw (no
    ``--transaction-log-decoder``). Raises ValueError for a decoded form it cannot read."""
    key, payload = _split_data(tail)
    if key is None:
        return None
    row: dict = {"record_type": "transaction", "key_version": None, "transactional_id": None, "value_version": None,
                 "is_tombstone": False, "producer_id": None, "previous_producer_id": None, "next_producer_id": None,
                 "producer_epoch": None, "transaction_timeout_ms": None, "state_id": None, "state": None,
                 "topic_partitions": None, "last_update_timestamp_ms": None, "start_timestamp_ms": None,
                 "client_transaction_version": None, "unknown_tags_json": None}
    if key.startswith("{"):
        k, _ = json.JSONDecoder().raw_decode(key)
        row["key_version"] = int(k["type"])
        row["transactional_id"] = k["data"]["transactionalId"]
        if payload is None or payload.startswith("<DELETE>"):
            row["is_tombstone"] = True
            return row
        v, _ = json.JSONDecoder().raw_decode(payload)
        d = v["data"]
        state_id = int(d["transactionStatus"])
        parts = d.get("transactionPartitions")
        row.update(value_version=int(v["version"]), producer_id=d["producerId"], producer_epoch=d["producerEpoch"],
                   previous_producer_id=d.get("previousProducerId"), next_producer_id=d.get("nextProducerId"),
                   transaction_timeout_ms=d["transactionTimeoutMs"], state_id=state_id,
                   state=next((n for n, i in _STATE_IDS.items() if i == state_id), None),
                   topic_partitions=None if parts is None else [
                       {"topic": p["topic"], "partition": int(x)} for p in parts for x in p["partitionIds"]],
                   last_update_timestamp_ms=d["transactionLastUpdateTimestampMs"],
                   start_timestamp_ms=d["transactionStartTimestampMs"],
                   client_transaction_version=d.get("clientTransactionVersion"))
        if row["value_version"] >= 1:  # flexible: omitted tagged fields take their defaults
            row["previous_producer_id"] = row["previous_producer_id"] if row["previous_producer_id"] is not None else -1
            row["next_producer_id"] = row["next_producer_id"] if row["next_producer_id"] is not None else -1
            row["client_transaction_version"] = row["client_transaction_version"] or 0
        return row
    mk = _TXN_KEY_V3.match(key)
    if mk is None:
        return None  # printed raw: not decodable from the text
    row["transactional_id"] = mk.group("id")
    row["key_version"] = 0
    if payload is None or payload.startswith("<DELETE>"):
        row["is_tombstone"] = True
        return row
    mv = _TXN_VALUE_V3.match(payload)
    if mv is None:
        raise ValueError(f"transaction metadata of {mk.group('id')!r} not in the decoder's layout")
    parts = []
    for tp in (p for p in mv.group("parts").split(",") if p):
        m = _TOPIC_PART.match(tp)
        if m is None:
            raise ValueError(f"partition {tp!r} of {mk.group('id')!r} is not topic-N")
        parts.append({"topic": m.group("topic"), "partition": int(m.group("partition"))})
    state = mv.group("state")
    row.update(producer_id=int(mv.group("pid")), producer_epoch=int(mv.group("epoch")), state=state,
               state_id=_STATE_IDS.get(state), topic_partitions=parts,
               last_update_timestamp_ms=int(mv.group("upd")), transaction_timeout_ms=int(mv.group("timeout")))
    return row


# -- __cluster_metadata records as --cluster-metadata-decoder prints them ----------------------------

def decode_metadata_text(tail: str) -> dict | None:
    """A ``metadata_records`` row (:mod:`auditor.formats.metadata` columns) from a record
    printed by ``--cluster-metadata-decoder`` (3.x/4.x ``ClusterMetadataLogMessageParser``:
    ``payload: {"type":"PRODUCER_IDS_RECORD","version":0,"data":{...}}``, the generated
    message's JSON), or None when printed raw. The frame version is not printed (null)."""
    from auditor.formats.metadata import COLUMNS, RECORD_TYPES, _dumps, _fill_typed

    _key, payload = _split_data(tail)
    if payload is None or not payload.startswith("{"):
        return None
    v, _ = json.JSONDecoder().raw_decode(payload)
    if not isinstance(v, dict) or "type" not in v or "data" not in v:
        return None
    api_key = next((k for k, name in RECORD_TYPES.items() if name == v["type"]), None)
    row: dict = dict.fromkeys(c.name for c in COLUMNS)
    row.update(frame_version=None, api_key=api_key, record_type=v["type"], record_version=int(v["version"]))
    if api_key is not None:
        row["data_json"] = _dumps(v["data"])
        _fill_typed(api_key, v["data"], row)
    return row


# -- __consumer_offsets offset commits as --offsets-decoder prints them ------------------------------

_OFFSET_KEY_V3 = re.compile(r"^offset_commit::group=(?P<rest>.*)$")
_OFFSET_VALUE_V3 = re.compile(r"^offset=(?P<offset>-?\d+)(?:,metadata=(?P<metadata>.*))?$")
_OFFSET_COMMIT_KEY_TYPES = (0, 1)  # OffsetCommitKey versions (CoordinatorRecordType OFFSET_COMMIT, legacy 0)


def decode_offsets_text(tail: str) -> dict | None:
    """An ``offset_commits`` row (:data:`auditor.formats.consumer_offsets.OFFSET_COMMIT_COLUMNS`) from
    a ``__consumer_offsets`` record printed by ``--offsets-decoder``, or None for a record of another
    kind (group metadata, the newer group protocols' records) or printed raw.

    * 4.x (``OffsetsMessageParser``, a ``CoordinatorRecordMessageParser``, Kafka 4.3.1): the
      generated ``OffsetCommitKey``/``OffsetCommitValue`` JSON, ``{"type": "1", "data": {...}}`` and
      ``{"version": "3", "data": {...}}``: every field but unknown tagged ones;
    * 2.8/3.x (``GroupMetadataManager.formatRecordKeyAndValue``, 3.5.2):
      ``offset_commit::group=G,partition=T-P`` and ``offset=N`` or ``offset=N,metadata=M`` (metadata
      only when not empty): the group, partition, offset and metadata; versions, leader epoch and
      timestamps are not printed (null).

    A tombstone prints ``<DELETE>``. Raises ValueError for a decoded form it cannot read."""
    key, payload = _split_data(tail)
    if key is None:
        return None
    row: dict = {"record_type": "offset_commit", "key_version": None, "group_id": None, "topic": None,
                 "partition": None, "value_version": None, "is_tombstone": False, "committed_offset": None,
                 "committed_leader_epoch": None, "committed_metadata": None, "commit_timestamp_ms": None,
                 "expire_timestamp_ms": None, "unknown_tags_json": None}
    if key.startswith("{"):
        k, _ = json.JSONDecoder().raw_decode(key)
        if int(k["type"]) not in _OFFSET_COMMIT_KEY_TYPES:
            return None
        kd = k["data"]
        row.update(key_version=int(k["type"]), group_id=kd["group"], topic=kd["topic"], partition=int(kd["partition"]))
        if payload is None or payload.startswith("<DELETE>"):
            row["is_tombstone"] = True
            return row
        v, _ = json.JSONDecoder().raw_decode(payload)
        d = v["data"]
        # fields of a newer schema than the decoder's (4.4's tagged topicId): the text names them, not their
        # tags, so they are kept by name (the segment decoder keeps them by tag number)
        extra = {n: x for n, x in d.items()
                 if n not in ("offset", "leaderEpoch", "metadata", "commitTimestamp", "expireTimestamp")}
        row["unknown_tags_json"] = json.dumps(extra, sort_keys=True) if extra else None
        row.update(value_version=int(v["version"]), committed_offset=d["offset"],
                   committed_leader_epoch=d.get("leaderEpoch", -1) if int(v["version"]) >= 3 else None,
                   committed_metadata=d.get("metadata"), commit_timestamp_ms=d["commitTimestamp"],
                   expire_timestamp_ms=d.get("expireTimestamp") if int(v["version"]) == 1 else None)
        return row
    mk = _OFFSET_KEY_V3.match(key)
    if mk is None:
        return None
    group, sep, tp = mk.group("rest").rpartition(",partition=")
    m = _TOPIC_PART.match(tp) if sep else None
    if m is None:
        raise ValueError(f"offset commit key {key!r} names no topic-partition")
    row.update(group_id=group, topic=m.group("topic"), partition=int(m.group("partition")))
    if payload is None or payload.startswith("<DELETE>"):
        row["is_tombstone"] = True
        return row
    mv = _OFFSET_VALUE_V3.match(payload)
    if mv is None:
        raise ValueError(f"offset commit of {group!r} not in the decoder's layout")
    row.update(committed_offset=int(mv.group("offset")), committed_metadata=mv.group("metadata") or "")
    return row
