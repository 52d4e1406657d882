"""Work of ``txn-audit dump`` overlapped on threads: reading ahead and writing out.

Why: a dump is three steps per chunk of batches -- read and decode the headers
(CRC included), format the JSON lines, copy them out -- and on the main thread
alone they take turns on one core. The reads, the CRC tables and most numpy work
release the GIL, and so does the write system call, so each of them on a
thread of its own runs on the other core while the main thread formats:

* :func:`read_ahead` decodes the next chunks of a file while this one is formatted;
* :class:`BackgroundWriter` copies the formatted lines out while the next are made.
  A dump writes about twice the bytes it reads (~640 bytes of JSON per one-record
  batch), and the kernel's copy of that output is as much CPU as formatting it.

What stays as it was: the bytes and their order; memory (a few chunks wait, at
most: :data:`QUEUED` blocks of about :data:`BLOCK` bytes, ``depth`` chunks);
and errors -- an exception of the thread is raised in the main thread where it
would have been raised without it (the next item, the next ``write`` or ``flush``).
"""

from __future__ import annotations

import queue
import threading
from typing import BinaryIO, Iterator, TypeVar

T = TypeVar("T")

BLOCK = 1 << 20  # small writes are gathered up to this many bytes before they are handed over
QUEUED = 4  # blocks handed over and not yet written, at most
WRITE = 1 << 20  # bytes per write system call: copied while they are still in the CPU's cache


class _Raised:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()


def read_ahead(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """The items of ``items``, in order, produced by a thread up to ``depth`` ahead of
    the consumer. Closing this generator (or leaving its loop) stops the thread and
    closes ``items`` there before it returns; the thread must be the only one to use
    what ``items`` uses (``dump``: the window reads are positioned, the main
    thread's seeks do not move them)."""
    q: "queue.Queue[object]" = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                q.put(item)
                if stop.is_set():
                    return
            q.put(_END)
        except BaseException as exc:
            q.put(_Raised(exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="dump-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.exc
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        while thread.is_alive():  # unblock a put the consumer will never take
            try:
                q.get(timeout=0.05)
            except queue.Empty:
                pass
        thread.join()


class BackgroundWriter:
    """A write-only binary stream over ``out`` whose writes happen on a thread.

    A buffer passed to ``write`` is handed over as it is, not copied: the caller
    must not change it afterwards (``dump`` writes each formatted block once).

    ``flush()`` returns once every byte written so far has reached ``out`` (and
    ``out`` is flushed): callers flush before they print anything elsewhere
    (stderr) that must come after it. ``close()`` flushes and ends the thread;
    ``out`` stays open."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._pending = bytearray()
        self._queue: "queue.Queue[bytes | bytearray | memoryview | None]" = queue.Queue(maxsize=QUEUED)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="dump-stdout", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            block = self._queue.get()
            try:
                if block is None:
                    return
                if self._error is None:
                    with memoryview(block) as view:
                        for at in range(0, len(view), WRITE):
                            self._out.write(view[at:at + WRITE])
            except BaseException as exc:  # raised in the main thread from now on; later blocks are dropped
                self._error = exc
            finally:
                self._queue.task_done()

    def write(self, data: "bytes | bytearray | memoryview") -> int:
        self._check()
        n = len(data)
        if n >= BLOCK:
            if self._pending:
                self._queue.put(self._pending)
                self._pending = bytearray()
            self._queue.put(data)
        else:
            self._pending += data
            if len(self._pending) >= BLOCK:
                self._queue.put(self._pending)
                self._pending = bytearray()
        return n

    def fileno(self) -> int:
        """The descriptor written to (call :meth:`flush` before writing to it directly)."""
        return self._out.fileno()

    def flush(self) -> None:
        self._check()
        if self._pending:
            self._queue.put(self._pending)
            self._pending = bytearray()
        self._queue.join()
        self._check()
        self._out.flush()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._thread.is_alive():
                self._queue.put(None)
                self._thread.join()

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
