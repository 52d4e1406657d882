"""What ingestion attaches to every row: where it came from.

A *task* is one file (or one byte range of a large segment) plus what
discovery learnt about it from names and ``meta.properties``. Tasks are plain
dicts so they travel to Spark executors as rows of a DataFrame.
"""

from __future__ import annotations

import pyarrow as pa

# Columns every table starts with (problem rows carry them too).
CONTEXT_COLUMNS: list[pa.Field] = [
    pa.field("cluster_id", pa.string()),
    pa.field("broker_id", pa.int32()),
    pa.field("log_dir", pa.string()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("file", pa.string()),
]

# Appended to every decode output; null on data rows.
PROBLEM_COLUMNS: list[pa.Field] = [
    pa.field("_problem_kind", pa.string()),
    pa.field("_problem_position", pa.int64()),
    pa.field("_problem_message", pa.string()),
]

TASK_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("cluster_id", pa.string()),
        pa.field("broker_id", pa.int32()),
        pa.field("log_dir", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("base_offset", pa.int64()),
        pa.field("snapshot_epoch", pa.int64()),
        pa.field("size", pa.int64()),
        pa.field("range_start", pa.int64()),
        pa.field("range_end", pa.int64()),
        pa.field("active", pa.bool_()),
        # the inode discovery listed the file with (local files; null elsewhere)
        pa.field("inode", pa.int64()),
    ]
)


def context_of(task: dict) -> dict:
    return {
        "cluster_id": task.get("cluster_id"),
        "broker_id": task.get("broker_id"),
        "log_dir": task.get("log_dir"),
        "topic": task.get("topic"),
        "partition": task.get("partition"),
        "file": task.get("path"),
    }
