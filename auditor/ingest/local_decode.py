"""A local input's decode in processes of the driver's own, each writing its Parquet parts.

Why: on a local master, Spark's decode job costs what the decoding does not. One capture of
``sample_logs/`` (224 KiB, 61 tasks) took 1.8-2.6 s in that job -- two Python workers forked
by the JVM, each importing the decoders -- for a decode of 0.1 s, and only once the driver JVM
had started (2-2.5 s). A broker-sized log dir paid more: its decoded rows went from the Python
workers to the JVM as Arrow, were cached, and went back through Python to be written (a GiB
took 14 s of decode and write jobs for ~4.6 CPU-s of decoding; bench/JOURNAL.md,
``broker_dir.py``). Decoded here, in processes forked from the driver's before its JVM starts,
the decode runs while the JVM starts (``scan``) or with no JVM at all (``ingest``), and each
process writes its rows straight to Parquet.

What runs is what a Spark decode task runs: :func:`auditor.ingest.envelope.decode_tasks`
over the tasks as Arrow rows of ``TASK_SCHEMA`` (the same dicts an executor gets), with a
sink that writes each table's rows to the run's own part file
(``<staging>/<table>/part-<run>.parquet``) instead of carrying them in the envelope. The
tasks are cut into contiguous runs of similar byte totals (a few per process, so that a slow
run does not leave a core idle), and the parts are named in task order, so a reader listing
them in name order gets the rows in the order Spark's small-input job collected them (its
partitions are contiguous runs of the tasks too). The driver gets back only the envelope's
counts and problems (the ``files`` inventory is built from them).

Memory stays bounded per process: a window of the file being decoded and, per table, at most
``ROW_GROUP_ROWS`` rows waiting to be written.

Only for inputs on the local file system (a remote store is read where Spark's executors
run) and a driver with an embedded local master (``spark_job`` decides).

Spark-free.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import shutil
import threading
from concurrent.futures import ProcessPoolExecutor

import pyarrow as pa

from auditor.ingest.plan import decode_cost
from auditor.ingest.storage import is_remote

# decode cost (bytes of data segment, ``plan.decode_cost``) per decode process beyond the first: one process decodes a capture in about a tenth of
# a second; a second one pays (and takes the core the starting JVM would use) only on bigger inputs
BYTES_PER_PROCESS = 8 * 1024 * 1024
# runs of tasks per process when there are several processes: each process takes the next run when
# it is done with one, which evens out runs that decode slower than their byte count says
RUNS_PER_PROCESS = 4
# rows of one table a process holds before it writes them as a Parquet row group
ROW_GROUP_ROWS = 128 * 1024


def all_local(tasks: list[dict]) -> bool:
    """Are all ``tasks`` files of the local file system (none read through a remote store)?"""
    return all(not is_remote(t["path"]) for t in tasks)


def runs(tasks: list[dict], n: int) -> list[list[dict]]:
    """``tasks`` cut into at most ``n`` contiguous non-empty runs of similar decode costs
    (:func:`auditor.ingest.plan.decode_cost`), in order."""
    costs = [decode_cost(t) for t in tasks]
    total = sum(costs)
    out: list[list[dict]] = [[]]
    acc = 0
    for t, c in zip(tasks, costs):
        # start the next run once this one holds its share of the cost
        if out[-1] and len(out) < n and acc >= total * len(out) / n:
            out.append([])
        out[-1].append(t)
        acc += c
    return out


class PartWriter:
    """The sink of one run (:class:`auditor.ingest.envelope._Envelopes`): each table's rows
    buffered up to ``ROW_GROUP_ROWS`` and written as row groups of ``<root>/<table>/<name>``,
    with the codec the driver's tables use (``spark_job._write_small``). A table that gets
    no rows gets no file."""

    def __init__(self, root: str, name: str) -> None:
        self.root, self.name = root, name
        self._buffers: dict[str, list[pa.RecordBatch]] = {}
        self._rows: dict[str, int] = {}
        self._writers: dict = {}

    def __call__(self, table: str, rb: pa.RecordBatch) -> None:
        self._buffers.setdefault(table, []).append(rb)
        self._rows[table] = self._rows.get(table, 0) + rb.num_rows
        if self._rows[table] >= ROW_GROUP_ROWS:
            self._flush(table)

    def _flush(self, table: str) -> None:
        import pyarrow.parquet as pq

        batches = self._buffers.pop(table, [])
        self._rows[table] = 0
        if not batches:
            return
        w = self._writers.get(table)
        if w is None:
            os.makedirs(os.path.join(self.root, table), exist_ok=True)
            w = self._writers[table] = pq.ParquetWriter(os.path.join(self.root, table, self.name),
                                                        batches[0].schema, compression="zstd")
        w.write_table(pa.Table.from_batches(batches), row_group_size=ROW_GROUP_ROWS)

    def close(self) -> None:
        """Write what is buffered and close every file."""
        try:
            for table in list(self._buffers):
                self._flush(table)
        finally:
            for w in self._writers.values():
                w.close()
            self._writers = {}


def part_name(run: int) -> str:
    """The file name of run ``run``'s part of each table: in task order by name."""
    return f"part-{run:05d}.parquet"


def _decode_run(tasks: list[dict], names: list[str], root: str, run: int) -> pa.Table:
    """One run's part: its tables' rows written under ``root``; returns its envelope without
    payloads (what the ``files`` inventory is built from)."""
    from auditor.ingest import envelope
    from auditor.ingest.context import TASK_SCHEMA

    rows = pa.Table.from_pylist(tasks, schema=TASK_SCHEMA).to_batches()
    writer = PartWriter(root, part_name(run))
    try:
        out = list(envelope.decode_tasks(rows, names, sink=writer))
    finally:
        writer.close()
    return pa.Table.from_batches(out, schema=envelope.ENVELOPE_SCHEMA)


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
    """The tables ``names`` of ``tasks``, decoded by worker processes started at once, each run
    writing its parts under ``root`` (``<root>/<table>/part-<run>.parquet``); :meth:`result`
    waits for them and returns the envelope's counts and problems. Start it before the JVM: a
    fork copies only the calling thread, and a process that has started no threads of its own
    is safest to fork. ``root`` is the caller's (``spark_job`` makes it the staging directory of
    its ingest run ``run_id``)."""

    def __init__(self, tasks: list[dict], names: list[str], root: str, processes: int | None = None,
                 run_id: str | None = None) -> None:
        self.tasks = list(tasks)
        self.names = list(names)
        self.root = root
        self.run_id = run_id
        total = sum(decode_cost(t) for t in self.tasks)
        n = max(1, processes or min(os.cpu_count() or 1, 1 + total // BYTES_PER_PROCESS))
        parts = runs(self.tasks, n if n == 1 else n * RUNS_PER_PROCESS) if self.tasks else []
        self._pool, self._futures = None, []
        if parts:
            ctx = _context()
            forked = ctx.get_start_method() == "fork"
            if forked:
                # what the parent holds now is never collected in a child (the children of a fork
                # context are all started by the first submit, before the pool's own thread)
                gc.freeze()
            try:
                self._pool = ProcessPoolExecutor(max_workers=min(n, len(parts)), mp_context=ctx)
                self._futures = [self._pool.submit(_decode_run, p, self.names, root, i) for i, p in enumerate(parts)]
            finally:
                if forked:
                    gc.unfreeze()
        self._result: pa.Table | None = None

    def result(self) -> pa.Table:
        """The envelope (``envelope.ENVELOPE_SCHEMA``, payloads null: the rows are in the parts)
        in task order; a decode process's failure is raised here, as a failed decode task fails
        Spark's job."""
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

    def discard(self) -> None:
        """Stop the worker processes and remove ``root`` with what they wrote (the caller will not
        ingest it)."""
        self.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "LocalDecode":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
