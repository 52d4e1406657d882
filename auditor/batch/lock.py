"""One run at a time per warehouse.

Two runs on one warehouse would both resume or number the same run, and their
keyed overwrites and ledger commits would interleave (Delta serialises each
commit, not a run's sequence of them). On a warehouse that is a local or
mounted path the job therefore holds an exclusive ``flock`` on
``WAREHOUSE/.txn-audit.lock`` for the whole run; a second run started meanwhile
stops at once, before reading or writing anything, and says which run holds
the lock. The kernel drops the lock when its holder dies, ``kill -9``
included, so a killed run never leaves the warehouse locked (the next run
resumes it, see ``runs``). On NFS, Linux maps ``flock`` to an NFS lock.

A warehouse on object storage or HDFS (``s3a://``, ``abfss://``, ``hdfs://``)
has no such lock: the scheduler must keep runs apart (``flock`` around the
command, ``concurrencyPolicy: Forbid``, ``max_active_runs=1``; see
docs/operations.md).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from contextlib import contextmanager
from typing import Iterator

from auditor.ingest.storage import local_path as _local

LOCK_NAME = ".txn-audit.lock"


class WarehouseBusy(RuntimeError):
    """Another run holds the warehouse's lock."""


def local_path(wh: str) -> str | None:
    """The warehouse as a local path, or None for a URI no file lock can cover
    (another scheme: object storage, HDFS)."""
    return _local(wh)


@contextmanager
def warehouse_lock(wh: str) -> Iterator[str | None]:
    """Hold the warehouse's lock for the body; yields the lock file's path (None: not lockable)."""
    path = local_path(wh)
    if path is None:
        yield None
        return
    os.makedirs(path, exist_ok=True)
    lock_file = os.path.join(path, LOCK_NAME)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes (O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WarehouseBusy(
                f"warehouse {wh} is in use by another batch run ({_holder(lock_file)}); nothing was read or "
                f"written. Runs on one warehouse must not overlap: schedule them with flock -n, "
                f"concurrencyPolicy: Forbid or max_active_runs=1") from None
        os.ftruncate(fd, 0)
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.write(fd, json.dumps(me).encode())
        yield lock_file
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would race a waiting run)


def _holder(lock_file: str) -> str:
    """Who holds the lock, as the holder wrote it (best effort: it may be mid-write)."""
    try:
        with open(lock_file, encoding="utf-8") as f:
            h = json.loads(f.read() or "{}")
        return f"pid {h['pid']} on {h['host']} since {h['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"
