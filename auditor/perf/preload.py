"""PySpark's first-call imports done while the driver JVM starts (switch ``preload``, :mod:`auditor.perf`)."""

from __future__ import annotations

import threading

from auditor.perf import enabled


def preload_converters() -> None:
    """Import what PySpark's Py4J argument converters import at the session's first JVM call.

    Why: PySpark registers a numpy converter with Py4J (``pyspark.sql.types.NumpyArrayConverter``)
    whose ``can_convert``, asked about every argument of every call, imports ``pyspark.testing.utils``
    -- and with it pandas and numpy -- the first time: 0.23 CPU-s and 0.66-0.8 s of wall time on a
    busy machine, on the main thread, in the middle of the session's start. Launching the JVM is
    the main thread waiting for the JVM to write its port (``launch_gateway`` polls a file), so the
    import is done then, on this thread. Anything failing here fails again, visibly, where PySpark
    imports it."""
    try:
        import pyspark.testing.utils  # noqa: F401
    except Exception:  # noqa: BLE001 - PySpark's own import reports it
        pass


def start() -> threading.Thread | None:
    """Start :func:`preload_converters` on a thread (None when switched off); join it after the JVM is up."""
    if not enabled("preload"):
        return None
    t = threading.Thread(target=preload_converters, name="txn-audit-preload", daemon=True)
    t.start()
    return t
