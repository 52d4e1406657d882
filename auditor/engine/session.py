"""The one SparkSession factory used by the CLI, the scheduled job and the tests.

Default is an embedded ``local[*]`` session; ``--master`` and ``--conf`` (or
``spark-submit``, which pre-creates the session) select a real cluster. The
code that runs on executors only needs the ``auditor`` package importable there
(installed in the executor environment or shipped with ``--py-files``).
"""

from __future__ import annotations

import os
import sys
from typing import Mapping

_LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.sql.sources.partitionOverwriteMode": "static",
    "spark.python.worker.reuse": "true",
    "spark.ui.showConsoleProgress": "false",
}


def get_spark(master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str = "txn-audit"):
    """Return the active session if one exists (spark-submit, tests), else build one."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    if master is None and "PYSPARK_GATEWAY_PORT" in os.environ:
        # launched by spark-submit: its --master/--conf already configure the JVM
        builder = SparkSession.builder.appName(app_name)
        for k, v in (conf or {}).items():
            builder = builder.config(k, v)
        return builder.getOrCreate()
    # executors must run the same interpreter as the driver (our venv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    resolved = master or os.environ.get("TXN_AUDIT_SPARK_MASTER", "local[*]")
    if resolved.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    builder = builder.master(resolved)
    settings = dict(_LOCAL_DEFAULTS)
    if resolved.startswith("local"):
        # one shuffle partition per core: per-task overhead dominates on a single host
        settings["spark.sql.shuffle.partitions"] = str(os.cpu_count() or 2)
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("TXN_AUDIT_SPARK_LOG_LEVEL", "ERROR"))
    return spark


def parse_conf(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``["k=v", ...]`` as given to ``--conf`` -> dict; a pair without ``=`` is a usage error."""
    out: dict[str, str] = {}
    for p in pairs:
        if "=" not in p:
            raise ValueError(f"--conf expects key=value, got {p!r}")
        k, v = p.split("=", 1)
        out[k.strip()] = v
    return out
