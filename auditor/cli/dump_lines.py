"""The layout of a ``txn-audit dump`` batch line: its keys in order and the
tokens of its enumerated values, shared by the vectorised writer
(:mod:`auditor.cli.dump_fast`) and the compiled one (:mod:`auditor.cli.dump_native`).

The order is the per-object path's (``{"type": "batch", **segments.batch_row(...)}``):
the header columns as :class:`auditor.formats.batch.BatchHeader` has them, the
control record's two fields, then where the batch was read from. No numpy here.
"""

from __future__ import annotations

from auditor.formats.batch import CODEC_NAMES, COLUMN_NAMES, TS_TYPE_NAMES
from auditor.formats.jsonl_literals import key_literal, token
from auditor.formats.records import CONTROL_TYPES

BATCH_KEYS = ["type", *COLUMN_NAMES, "control_type", "coordinator_epoch", "segment_base_offset", "source"]
KEYS = {k: key_literal(i == 0, k) for i, k in enumerate(BATCH_KEYS)}
CODEC_TOKENS = [token(n) for n in CODEC_NAMES]
TS_TOKENS = [token(n) for n in TS_TYPE_NAMES]
MARKER_TOKENS = [token(CONTROL_TYPES[t]) for t in (0, 1)]  # ABORT, COMMIT
TYPE = token("batch")
END = b"}\n"


def tail(task: dict) -> bytes:
    """The end of every batch line of ``task``'s file: where it was read from."""
    source = "kraft-snapshot" if task["kind"] == "kraft-snapshot" else "segment"
    return KEYS["segment_base_offset"] + token(task.get("base_offset")) + KEYS["source"] + token(source) + END
