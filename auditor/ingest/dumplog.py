"""``kafka-dump-log.sh`` text as an ingest input: one inventory row per dumped segment.

A text file whose first non-empty line is ``Dumping <path>`` (any name, given
directly or found in a directory) is the output of Kafka's ``DumpLogSegments``. Each
``Dumping`` block becomes a row of its own in the ``files`` inventory, named
``<text file>::<dumped path>`` and placed by the dumped path (log dir, topic,
partition, base offset, ``.deleted``/``.cleaned``/``.swap`` status), so the live
log, the producer-state model and the coverage treat it like the segment it
printed. Its kind says what the text holds:

* ``dumped-segment``: batch lines with record lines (``--deep-iteration``: markers'
  COMMIT/ABORT, coordinator epochs, a legacy wrapper's first offset and count), or
  batch lines alone of a segment without control batches;
* ``dumped-segment-batches``: batch lines only, with control batches: whether each is a
  COMMIT or an ABORT is not shown, so the live log leaves the whole partition out
  (:mod:`auditor.model.livelog`) and the coverage says so;
* ``dumped-other``: a block of another kind of file (index, snapshot, checkpoint),
  a path that names no partition directory, or a file dumped a second time: listed,
  not read (reading the same batches twice would invent retries).

The broker id is -1 (the text names no broker). The log dir of every block is prefixed with the text file (``<text>::<log dir>``):
two texts taken on different brokers often name the same ``/var/lib/kafka/data``,
and merging them would make one replica of two. A text is therefore a replica of
its own, keyed by its log dir. It has no ``meta.properties``, so no cluster id of its
own: texts that dump ``__cluster_metadata`` (``--cluster-metadata-decoder``) and name
a topic id in common are one cluster (:func:`join_clusters`); a text without is a
cluster of its own. Dump the ``__transaction_state`` partitions in the same run
(``--files a,b,...``) for the coordinator's view.
"""

from __future__ import annotations

import posixpath
from typing import Iterator

from auditor.formats import dumplog_text as dt
from auditor.ingest.discovery import FileInfo, classify_file, parse_partition_dir
from auditor.ingest.problems import Problem
from auditor.ingest.storage import open_input

SEPARATOR = "::"
TEXT_KIND = "dump-log-text"
DEEP_KIND = "dumped-segment"
BATCHES_KIND = "dumped-segment-batches"
OTHER_KIND = "dumped-other"
# a KRaft snapshot (``.checkpoint``) of __cluster_metadata dumped with its records: read like a binary one
# (batches with source kraft-snapshot, metadata_records with source snapshot)
SNAPSHOT_KIND = "dumped-kraft-snapshot"
SEGMENT_KINDS = (DEEP_KIND, BATCHES_KIND, SNAPSHOT_KIND)
# internal topics whose records are decoded from text only in part: of __consumer_offsets, the offset
# commits --offsets-decoder prints (group metadata and the newer group records are not read from text)
UNDECODED_TOPICS = ("__consumer_offsets",)


def is_dump_text(path: str) -> bool:
    """The sniff: the first non-empty line of the file is ``Dumping <path>``."""
    try:
        with open_input(path) as f:
            head = f.read(dt.SNIFF_BYTES)
    except OSError:
        return False
    return dt.sniff(head)


def text_path(path: str) -> str:
    """The text file of a dumped block's row (``<text>::<dumped path>`` -> ``<text>``)."""
    return path.split(SEPARATOR, 1)[0]


def expand(fi: FileInfo) -> list[FileInfo]:
    """The inventory rows of a text file: its own (kind :data:`TEXT_KIND`), then one per
    ``Dumping`` block. Reads the text once, streaming."""
    # the text is not a log dir's file (even when found in one): its blocks name their own
    fi.kind, fi.log_dir, fi.topic, fi.partition, fi.dir_status = TEXT_KIND, None, None, None, "none"
    fi.broker_id = fi.cluster_id = None
    rows: list[FileInfo] = []
    seen: set[str] = set()
    try:
        with open_input(fi.path) as f:
            blocks = list(dt.sections(f, fi.size))
    except OSError as exc:
        fi.note = f"kafka-dump-log text, cannot be read: {exc.strerror or exc}"
        return [fi]
    for s in blocks:
        rows.append(_block_row(fi, s, s.dumped_path in seen))
        seen.add(s.dumped_path)
    fi.extra["topic_ids"] = set().union(*(s.topic_ids for s in blocks)) if blocks else set()
    segs = sum(r.kind in SEGMENT_KINDS for r in rows)
    fi.note = (f"kafka-dump-log text: {len(blocks)} dumped file(s), {segs} segment(s) read "
               f"(rows under {fi.path}{SEPARATOR}<dumped path>)")
    return [fi, *rows]


def _block_row(text: FileInfo, s: dt.Section, repeated: bool) -> FileInfo:
    dumped = s.dumped_path.rstrip("/")
    name = posixpath.basename(dumped)
    part_dir = posixpath.dirname(dumped)
    parsed = parse_partition_dir(posixpath.basename(part_dir))
    kind, fstatus, base, _epoch = classify_file(name)
    path = f"{text.path}{SEPARATOR}{dumped}"
    topic, partition, dir_status = parsed if parsed else (None, None, "none")
    log_dir = f"{text.path}{SEPARATOR}{posixpath.dirname(part_dir) or '.'}" if parsed else None
    note = f"from {text.path}, lines from {s.first_line} (bytes {s.start}..{s.end})"
    out_kind = OTHER_KIND
    if repeated:
        note += f": {dumped} was dumped earlier in this text: not read again"
    elif kind == "kraft-snapshot" and parsed:
        out_kind = SNAPSHOT_KIND  # base: the snapshot's end offset (the file name's)
        if s.record_lines == 0:
            note += ": dumped without --deep-iteration: its records are not in the text (batches only)"
    elif kind != "segment":
        note += f": a dump of a {kind} file: only segments and KRaft snapshots are read from kafka-dump-log text"
    elif not parsed:
        note += ": the dumped path names no partition directory (<topic>-<partition>): topic and partition unknown, not read"
    else:
        # batch lines alone say all the model needs, except which control batch is a COMMIT and which an ABORT
        untyped = s.record_lines == 0 and s.control_batches > 0
        out_kind = BATCHES_KIND if untyped else DEEP_KIND
        if untyped:
            note += (f": dumped without --deep-iteration: {s.control_batches} control batch(es) whose COMMIT/ABORT "
                     "is not shown; the partition is not audited")
        elif s.record_lines == 0 and s.batch_lines:
            note += ": dumped without --deep-iteration (batch lines only; no control batches)"
        if topic in UNDECODED_TOPICS:
            note += (f": of {topic} only offset commits printed by --offsets-decoder are read from text "
                     "(group metadata and group records are not)")
    row = FileInfo(path, text.input_root, log_dir, topic, partition, dir_status, out_kind, fstatus, base, None,
                   s.end - s.start, text.mtime_ms, note=note)
    # the model keys a replica by its broker id, which the text does not carry: -1, Kafka's "no broker"
    # (as MetadataResponse's NO_LEADER_ID), never null, which no join would match
    row.broker_id = -1 if parsed else None
    row.extra = {"range_start": s.start, "range_end": s.end}
    return row


TEXT_CLUSTER_PREFIX = "topic-id:"


def join_clusters(files: list[FileInfo]) -> None:
    """Texts of one cluster made one cluster: texts whose ``__cluster_metadata`` blocks name a
    topic id in common (ids are random UUIDs: two clusters never share one), chained through any
    text they share one with, get one cluster id, ``topic-id:<least id>`` (a text carries no
    ``meta.properties``), on the text's row and its blocks'. Their log dirs stay apart (each text
    is a replica of its own), so one transaction seen by three brokers' texts is one finding over
    three replicas, not three clusters' findings. A text naming no topic id keeps none."""
    texts = [fi for fi in files if fi.kind == TEXT_KIND and fi.extra.get("topic_ids")]
    parent = list(range(len(texts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, fi in enumerate(texts):
        for tid in fi.extra["topic_ids"]:
            if tid in owner:
                parent[root(i)] = root(owner[tid])
            else:
                owner[tid] = i
    ids: dict[int, set] = {}
    for i, fi in enumerate(texts):
        ids.setdefault(root(i), set()).update(fi.extra["topic_ids"])
    by_text = {fi.path: TEXT_CLUSTER_PREFIX + min(ids[root(i)]) for i, fi in enumerate(texts)}
    for fi in files:
        key = text_path(fi.path) if is_block(fi) else fi.path
        if key in by_text and (fi.kind == TEXT_KIND or is_block(fi)):
            fi.cluster_id = by_text[key]


def is_block(fi: FileInfo) -> bool:
    """Whether an inventory row is a block of a kafka-dump-log text (not a file of its own)."""
    return fi.kind in (*SEGMENT_KINDS, OTHER_KIND) and "range_start" in fi.extra


def block_fingerprint(fi: FileInfo) -> str | None:
    """BLAKE2b of a block's bytes of its text (the scheduled job's change detection,
    :mod:`auditor.batch.ledger`): a block re-dumped with other content is decoded again."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    start, end = fi.extra["range_start"], fi.extra["range_end"]
    h.update((end - start).to_bytes(8, "big"))
    try:
        with open_input(text_path(fi.path)) as f:
            f.seek(start)
            left = end - start
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                h.update(chunk)
                left -= len(chunk)
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    return h.hexdigest()


# -- decoding (one task per dumped segment: a byte range of the text) -------------------

def _line_of(f, position: int) -> int:
    """1-based line number of the byte at ``position`` (counted only when a problem is reported)."""
    here = f.tell()
    f.seek(0)
    n, left = 1, position
    while left > 0:
        chunk = f.read(min(left, 1 << 20))
        if not chunk:
            break
        n += chunk.count(b"\n")
        left -= len(chunk)
    f.seek(here)
    return n


def _problem(f, task: dict, p: dt.TextProblem) -> Problem:
    if p.in_segment:  # the tool's own report on the segment: a problem of the segment, at its byte
        return Problem(p.kind, p.position, p.message, fatal=False)
    # a text problem is the text's, not the segment's: its kind never cuts the live log
    # (auditor.model.livelog.RECOVERY_TRUNCATES), its position is a byte of the text
    return Problem(f"text-{p.kind}", p.position,
                   f"{text_path(task['path'])} line {_line_of(f, p.position)} (byte {p.position}): {p.message}",
                   fatal=False)


def _items(task: dict, f) -> Iterator:
    start = task.get("range_start") or 0
    end = task.get("range_end")
    yield from dt.iter_text(f, start, end if end is not None and end >= 0 else None)


def decode_batches(task: dict, f) -> Iterator[dict | Problem]:
    """``batches`` rows of a dumped segment; an ``isvalid: false`` batch is a ``bad-crc``
    problem at the batch's position in the segment, as the segment decoder reports it."""
    for item in _items(task, f):
        if isinstance(item, dt.TextProblem):
            yield _problem(f, task, item)
        elif isinstance(item, dict):
            if not item["crc_valid"]:
                yield Problem("bad-crc", item["position"] + 17,
                              f"batch at offset {item['last_offset']}: isvalid false in the dump (stored CRC {item['crc']})",
                              fatal=False)
            item["segment_base_offset"] = task.get("base_offset")
            item["source"] = "kraft-snapshot" if task["kind"] == SNAPSHOT_KIND else "segment"
            yield item


def _decoded_records(task: dict, f, decode_tail) -> Iterator[dict | Problem]:
    """Rows that ``decode_tail`` makes of each data record's printed payload, with the record's offset,
    timestamp and its batch's producer fields; problems of the text as they come. A payload the decoder
    cannot read is a ``bad-record`` problem naming its line; one it does not decode (``None``) gives no row."""
    for item in _items(task, f):
        if isinstance(item, dt.TextProblem):
            yield _problem(f, task, item)
            continue
        if not isinstance(item, dt.TextRecord) or item.batch.get("is_control"):
            continue
        try:
            row = decode_tail(item.tail)
        except (ValueError, KeyError, TypeError) as exc:
            yield Problem("bad-record", item.position,
                          f"{text_path(task['path'])} line {_line_of(f, item.position)}: record at offset {item.offset}: {exc}",
                          fatal=False)
            continue
        if row is None:
            continue
        b = item.batch
        row.update(offset=item.offset, timestamp=item.timestamp, batch_position=b.get("position"),
                   batch_producer_id=b.get("producer_id"), batch_producer_epoch=b.get("producer_epoch"),
                   batch_is_transactional=b.get("is_transactional"))
        yield row


def decode_txn_log(task: dict, f) -> Iterator[dict | Problem]:
    """``transaction_log`` rows of a dumped ``__transaction_state`` segment printed with
    ``--transaction-log-decoder``; records printed raw give none (see the inventory note)."""
    yield from _decoded_records(task, f, dt.decode_txn_text)


def decode_offset_commits(task: dict, f) -> Iterator[dict | Problem]:
    """``offset_commits`` rows of a dumped ``__consumer_offsets`` segment printed with
    ``--offsets-decoder`` (the fields the text holds: :func:`dt.decode_offsets_text`); other record
    kinds and records printed raw give none."""
    yield from _decoded_records(task, f, dt.decode_offsets_text)


def decode_metadata(task: dict, f) -> Iterator[dict | Problem]:
    """``metadata_records`` rows of a dumped ``__cluster_metadata`` segment printed with
    ``--cluster-metadata-decoder`` (``source`` ``log``), or of a dumped KRaft snapshot (``source``
    ``snapshot``, ``snapshot_end_offset`` its file name's end offset, as for a binary one); records
    printed raw give none."""
    snapshot = task["kind"] == SNAPSHOT_KIND
    for row in _decoded_records(task, f, dt.decode_metadata_text):
        if isinstance(row, dict):
            row.update(source="snapshot" if snapshot else "log",
                       snapshot_end_offset=task.get("base_offset") if snapshot else None)
        yield row
