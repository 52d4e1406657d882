"""``txn-audit dump``: a structured, faster ``kafka-dump-log``.

One JSON object per batch (and per record with ``--records``, a control record's marker
included), with snake_case versions of Kafka's field names, each ending with the file it
came from and its partition directory's topic and partition (:func:`auditor.dump._lines.place`). Works on any file ingestion understands
(segments, KRaft snapshots, producer snapshots, indexes, checkpoints): each is
run through the same table decoders as ``ingest``, so the dump and the tables
always agree. No Spark is started.

The one entry is :func:`run` (the click command, :mod:`auditor.cli.dump_cmd`, and
``cli/main.py``'s plain-argv path call it). Inside, all private:

* ``_run``: the command, file by file; the per-object path (the reference the others are tested
  against) and the choice of path;
* ``_native`` + ``_dumpv2.c``: the compiled path for segments (optional C extension);
* ``_fast`` + ``_columns``: the vectorised path (numpy), and the JSON lines it formats column-wise;
* ``_lines`` + ``_literals``: a line's keys and tokens, shared by both (no numpy);
* ``_overlap``: reading ahead and writing out on threads.
"""

from __future__ import annotations

from auditor.dump._run import run

__all__ = ["run"]
