"""Kill points for the idempotence tests: ``TXN_AUDIT_CRASH_AT=<stage>``.

At the named stage the job SIGKILLs its own Spark JVM and then itself (what
``kill -9`` of the job's processes or an OOM-killed container does: no
``finally``, no shutdown hook, nothing flushed). ``decode:<table>`` fires
inside the first decode task of that table's write, i.e. while the Delta write
job is running and before its commit (embedded ``local`` mode: the task's
Python worker kills the driver JVM and the driver process).

``during:<step>`` fires while the first Spark job of that step runs (the
findings MERGE runs several jobs before its commit), from a watcher thread.

Unset (the normal case) every call is a no-op.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager

ENV = "TXN_AUDIT_CRASH_AT"
DRIVER_ENV = "TXN_AUDIT_DRIVER_PID"


def armed() -> str | None:
    return os.environ.get(ENV) or None


def prepare() -> None:
    """Called before the Spark JVM starts: lets decode tasks find the driver."""
    if armed():
        os.environ.setdefault(DRIVER_ENV, str(os.getpid()))


def point(stage: str) -> None:
    """Driver side: die here if this is the armed stage."""
    if armed() != stage:
        return
    _kill_jvm_of_driver()
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_jvm_of_driver() -> None:
    try:
        from pyspark import SparkContext

        gw = SparkContext._gateway
        proc = getattr(gw, "proc", None) if gw is not None else None
        if proc is not None:  # JVM launched by this Python process
            os.kill(proc.pid, signal.SIGKILL)
        elif "PYSPARK_GATEWAY_PORT" in os.environ:  # spark-submit: the JVM is our parent
            os.kill(os.getppid(), signal.SIGKILL)
    except (ImportError, ProcessLookupError, PermissionError):
        pass


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def task_point(stage: str) -> None:
    """Executor side (a Python worker of a local-mode job): kill the driver JVM
    (the nearest ``java`` ancestor) and the driver process, then this worker."""
    if armed() != stage:
        return
    pid = os.getpid()
    try:
        while pid > 1:
            pid = _ppid(pid)
            if _comm(pid) == "java":
                os.kill(pid, signal.SIGKILL)
                break
    except (OSError, ValueError):
        pass
    driver = os.environ.get(DRIVER_ENV)
    if driver:
        try:
            os.kill(int(driver), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    os._exit(137)


@contextmanager
def during(step: str, spark):
    """Die as soon as a Spark job of the wrapped block is running, if ``during:<step>`` is armed."""
    if armed() != f"during:{step}":
        yield
        return
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getActiveJobsIds() or [])
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if set(tracker.getActiveJobsIds() or []) - before:
                point(f"during:{step}")
            time.sleep(0.005)

    threading.Thread(target=watch, daemon=True).start()
    try:
        yield
    finally:
        done.set()
