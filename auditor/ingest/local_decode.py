"""A small local input's decode in processes of its own, started before Spark is.

Why: on a small input, Spark's decode job was mostly fixed cost. One capture of
``sample_logs/`` (224 KiB, 61 tasks) took 1.8-2.6 s in that job -- two Python
workers forked by the JVM, each importing the decoders, a task each -- for a
decode that takes 0.1 s in the driver's process; every capture of
``sample_logs/`` (29 MiB, ~2,500 tasks) 2.7-3.1 s for ~1.2 CPU-s of decoding.
And the job could only start once the driver JVM had (2-2.5 s). Decoded here,
in processes forked from the driver's before its JVM starts, the decode runs
while the JVM starts and costs no Spark job (bench/JOURNAL.md, `scan.py`).

What runs is what a Spark decode task runs: :func:`auditor.ingest.envelope.decode_tasks`
over the tasks as Arrow rows of ``TASK_SCHEMA`` (the same dicts an executor gets),
so the envelope, and the tables written from it, are the same. The tasks are cut
into contiguous runs of similar byte totals, one per process, and their
envelopes put back together in task order: the order Spark's small-input job
collected them in (its partitions are contiguous runs of the tasks too).

Only for inputs on the local file system (a remote store is read where Spark's
executors run) and a driver with an embedded local master (``ingest_job`` decides).

Spark-free.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor

import pyarrow as pa

from auditor.ingest.storage import is_remote

# input bytes per decode process beyond the first: one process decodes a capture in about a tenth of
# a second; a second one pays (and takes the core the starting JVM would use) only on bigger inputs
BYTES_PER_PROCESS = 8 * 1024 * 1024


def _task_bytes(task: dict) -> int:
    return task["size"] if task["range_end"] < 0 else task["range_end"] - task["range_start"]


def all_local(tasks: list[dict]) -> bool:
    """Are all ``tasks`` files of the local file system (none read through a remote store)?"""
    return all(not is_remote(t["path"]) for t in tasks)


def runs(tasks: list[dict], n: int) -> list[list[dict]]:
    """``tasks`` cut into at most ``n`` contiguous non-empty runs of similar byte totals (in order)."""
    total = sum(_task_bytes(t) for t in tasks)
    out: list[list[dict]] = [[]]
    acc = 0
    for t in tasks:
        # start the next run once this one holds its share of the bytes
        if out[-1] and len(out) < n and acc >= total * len(out) / n:
            out.append([])
        out[-1].append(t)
        acc += _task_bytes(t)
    return out


def _decode_run(tasks: list[dict], names: list[str]) -> pa.Table:
    """One process's part: the envelope of ``tasks`` (what a Spark decode task emits for them)."""
    from auditor.ingest import envelope
    from auditor.ingest.context import TASK_SCHEMA

    rows = pa.Table.from_pylist(tasks, schema=TASK_SCHEMA).to_batches()
    return pa.Table.from_batches(list(envelope.decode_tasks(rows, names)), schema=envelope.ENVELOPE_SCHEMA)


def _context():
    """How the decode processes start.

    Fork when this process runs no thread but the main one (``scan`` before its JVM and Py4J
    threads exist): the child starts with the decoders imported. A process with other threads is
    not forked: the child would inherit their objects half-way (locks, native libraries' state) and
    finalize them on its first garbage collection -- a forked decode segfaulted that way in a
    test session running a librdkafka client and Py4J. There, a fork server (a fresh interpreter,
    started once, with the decoders preloaded) forks the decode processes instead; elsewhere the
    platform's default.
    """
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["auditor.ingest.envelope", "auditor.ingest.local_decode"])
        return ctx
    return multiprocessing.get_context()


class LocalDecode:
    """The envelope of ``tasks`` for the tables ``names``, decoded in worker processes started
    at once; :meth:`result` waits for it. Start it before the JVM: a fork copies only the
    calling thread, and a process that has started no threads of its own is safest to fork."""

    def __init__(self, tasks: list[dict], names: list[str], processes: int | None = None) -> None:
        self.tasks = list(tasks)
        self.names = list(names)
        total = sum(_task_bytes(t) for t in self.tasks)
        n = processes or min(os.cpu_count() or 1, 1 + total // BYTES_PER_PROCESS)
        parts = runs(self.tasks, max(1, n)) if self.tasks else []
        self._pool, self._futures = None, []
        if parts:
            ctx = _context()
            forked = ctx.get_start_method() == "fork"
            if forked:
                # what the parent holds now is never collected in a child (the children of a fork
                # context are all started by the first submit, before the pool's own thread)
                gc.freeze()
            try:
                self._pool = ProcessPoolExecutor(max_workers=len(parts), mp_context=ctx)
                self._futures = [self._pool.submit(_decode_run, p, self.names) for p in parts]
            finally:
                if forked:
                    gc.unfreeze()
        self._result: pa.Table | None = None

    def result(self) -> pa.Table:
        """The envelope (``envelope.ENVELOPE_SCHEMA``) in task order; a decode process's failure
        is raised here, as a failed decode task fails Spark's job."""
        if self._result is None:
            from auditor.ingest.envelope import ENVELOPE_SCHEMA

            try:
                parts = [f.result() for f in self._futures]
            finally:
                self.close()
            self._result = pa.concat_tables(parts) if parts else ENVELOPE_SCHEMA.empty_table()
        return self._result

    def close(self) -> None:
        """Stop the worker processes (what has not started is cancelled)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> "LocalDecode":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
