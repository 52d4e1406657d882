"""The ``files`` table: one row per file found, with what became of it.

Built on the driver from discovery facts plus, per file, the number of rows
each table got and the first problem any decoder hit (kind, message, byte
position). This is what tells an operator which inputs were bad and where.
"""

from __future__ import annotations

import pyarrow as pa

from auditor.ingest.discovery import FileInfo
from auditor.ingest.plan import DECODED_KINDS
from auditor.ingest.problems import BAD_RECORD

FILES_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string()),
        pa.field("input_root", pa.string()),
        pa.field("log_dir", pa.string()),
        pa.field("cluster_id", pa.string()),
        pa.field("broker_id", pa.int32()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("dir_status", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("file_status", pa.string()),
        pa.field("base_offset", pa.int64()),
        pa.field("snapshot_epoch", pa.int64()),
        pa.field("size", pa.int64()),
        pa.field("mtime_ms", pa.int64()),
        pa.field("next_offset", pa.int64()),
        pa.field("rows", pa.int64()),
        pa.field("tables", pa.list_(pa.string())),
        pa.field("status", pa.string()),
        pa.field("problem_count", pa.int32()),
        pa.field("error_message", pa.string()),
        pa.field("error_position", pa.int64()),
        pa.field("note", pa.string()),
    ]
)

# statuses that do not make an input "bad" for the exit code
CLEAN_STATUSES = {"ok", "empty", "skipped"}


def build_inventory(
    files: list[FileInfo],
    counts: dict[str, dict[str, int]],
    problems: dict[str, list[tuple[int, str, str]]],
    next_offsets: dict[str, int] | None = None,
) -> list[dict]:
    """``counts[path][table]`` = rows; ``problems[path]`` = [(position, kind, message)];
    ``next_offsets[path]`` = the offset after a segment's last decoded batch."""
    rows = []
    for fi in files:
        row = fi.as_row()
        per_table = counts.get(fi.path, {})
        row["rows"] = sum(per_table.values())
        row["next_offset"] = (next_offsets or {}).get(fi.path)
        row["tables"] = sorted(t for t, n in per_table.items() if n) or None
        probs = sorted(problems.get(fi.path, []), key=lambda p: (p[0] if p[0] >= 0 else 1 << 62))
        row["problem_count"] = len(probs)
        row["error_message"] = row["error_position"] = None
        if fi.kind == "out-of-range-name" or (fi.kind == "unknown" and fi.note and "beyond Kafka's limit" in fi.note):
            # a number in the name beyond Kafka's limits: listed, not read, the run goes on
            row["status"] = "out-of-range"
            row["error_message"] = fi.note
        elif fi.kind in ("missing", "unreadable-dir"):
            row["status"] = "unreadable"
            row["error_message"] = fi.note
        elif fi.size < 0:
            row["status"] = "unreadable"
            row["error_message"] = fi.note
        elif fi.kind == "empty-dir":
            row["status"] = "empty"
        elif fi.kind in ("dump-log-text", "dumped-other"):
            # kafka-dump-log text (auditor.ingest.dumplog): its dumped segments have rows of their own
            row["status"] = "ok" if fi.kind == "dump-log-text" else "skipped"
        elif fi.kind not in DECODED_KINDS:
            row["status"] = "foreign" if fi.path == fi.input_root else "skipped"
            if not row["note"]:
                row["note"] = "not a Kafka file name" if fi.kind == "unknown" else f"{fi.kind} files are not decoded"
        elif probs and all(k == "zero-tail" for _, k, _ in probs) and fi.kind in ("offset-index", "time-index"):
            # the broker preallocates index files of the active segment: zeros there are expected
            row["status"] = "ok"
            row["note"] = f"preallocated zero tail from byte {probs[0][0]} (normal for an active or crashed segment's index)"
        elif probs:
            pos, kind, msg = probs[0]
            if kind == BAD_RECORD:
                # a problem of the batches themselves, later in the file, is what recovery acts on: it leads
                framing = next((p for p in probs if p[1] != BAD_RECORD), None)
                if framing is not None:
                    row["note"] = "; ".join(x for x in (row["note"], f"also an undecodable record at byte {pos}: {msg}") if x)
                    pos, kind, msg = framing
            nothing = row["rows"] == 0 and 0 <= pos <= 17 and kind in ("unknown-magic", "bad-length", "truncated", "corrupt", "unknown-version")
            row["status"] = "foreign" if nothing and fi.size > 0 else kind
            row["error_message"] = (f"does not look like a Kafka {fi.kind}: {msg}" if row["status"] == "foreign" else msg)
            row["error_position"] = pos
        elif fi.size == 0:
            row["status"] = "empty"
        else:
            row["status"] = "ok"
        rows.append(row)
    return rows
