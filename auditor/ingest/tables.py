"""The table catalog: which files feed which table, and how a task is decoded.

Every table is ``CONTEXT_COLUMNS`` + the decoder's own columns. A table spec is
Spark-free: ``decode_task`` opens the file read-only and yields row dicts or
:class:`Problem` objects; the Spark job (``auditor.engine.ingest_job``) and the
local runner both call it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import pyarrow as pa

from auditor.errors import DecodeError
from auditor.ingest.context import CONTEXT_COLUMNS, context_of
from auditor.ingest.problems import Problem
from auditor.ingest import segments

Decoder = Callable[[dict, "object"], Iterator["dict | Problem"]]


@dataclass(frozen=True)
class TableSpec:
    name: str
    kinds: tuple[str, ...]
    columns: tuple[pa.Field, ...]
    decode: Decoder
    topic: str | None = None  # only files of this topic
    doc: str = ""

    def accepts(self, task: dict) -> bool:
        if task["kind"] not in self.kinds:
            return False
        return self.topic is None or task.get("topic") == self.topic

    @property
    def schema(self) -> pa.Schema:
        return pa.schema(list(CONTEXT_COLUMNS) + list(self.columns))


def _open(task: dict):
    return open(task["path"], "rb", buffering=0)


def _range(task: dict) -> tuple[int, int | None]:
    start = task.get("range_start") or 0
    end = task.get("range_end")
    return start, (end if end is not None and end >= 0 else None)


def decode_batches(task: dict, f) -> Iterator[dict | Problem]:
    start, end = _range(task)
    source = "kraft-snapshot" if task["kind"] == "kraft-snapshot" else "segment"
    for item in segments.iter_batches(f, task["size"], start, end):
        if isinstance(item, Problem):
            yield item
        else:
            h, extra = item
            yield segments.batch_row(h, extra, task.get("base_offset"), source)


TABLES: dict[str, TableSpec] = {}


def register(spec: TableSpec) -> TableSpec:
    TABLES[spec.name] = spec
    return spec


register(
    TableSpec(
        "batches",
        ("segment", "kraft-snapshot"),
        tuple(segments.BATCH_COLUMNS),
        decode_batches,
        doc="one row per record batch (v2) or legacy entry of every segment and KRaft snapshot",
    )
)


def decode_task(spec: TableSpec, task: dict) -> Iterator[dict]:
    """Rows of ``spec`` for ``task``; problems come out as rows with ``_problem_*`` set."""
    ctx = context_of(task)
    try:
        f = _open(task)
    except OSError as exc:
        yield Problem("unreadable", 0, f"cannot open: {exc.strerror or exc}").row(ctx)
        return
    with f:
        try:
            for item in spec.decode(task, f):
                if isinstance(item, Problem):
                    yield item.row(ctx)
                else:
                    item.update(ctx)
                    yield item
        except OSError as exc:
            yield Problem("io-error", -1, f"read failed: {exc.strerror or exc}").row(ctx)
        except DecodeError as exc:
            yield Problem(exc.kind, exc.position, exc.message).row(ctx)
        except Exception as exc:  # a decoder bug must not kill the whole audit
            yield Problem("internal-error", -1, f"{type(exc).__name__}: {exc}").row(ctx)
