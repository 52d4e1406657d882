"""The training run of the class-data sharing archive (:mod:`auditor.perf.jvmcache`).

It runs what a user runs (the session, the ingest job and the audit runner), so it sits with
the commands, at the top of the package graph: the performance machinery never imports the
session it tunes, and the session, ingest and engine never import it. It runs as a child
process (``python -m auditor.cli.jvmcache_train``) and nothing imports it.
"""

from __future__ import annotations

import sys
import tempfile

from auditor.perf.jvmcache import QUIET


def train(target: str, inputs: list[str]) -> None:
    """The child of :func:`auditor.perf.jvmcache.build`: what ``txn-audit scan`` runs, in a session whose driver
    JVM archives its classes at exit (when this process ends)."""
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest
    from auditor.report.spark.data import ReportData
    from auditor.spark.session import get_spark

    spark = get_spark(conf={"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={target} {QUIET}"},
                      delta=False)
    with tempfile.TemporaryDirectory(prefix="txn-audit-cds-") as tmp:
        ingest(spark, inputs, f"{tmp}/tables")
        audit(spark, f"{tmp}/tables", report=ReportData(), out=f"{tmp}/findings")
    spark.stop()


if __name__ == "__main__":  # python -m auditor.cli.jvmcache_train TARGET CAPTURE_DIR...
    train(sys.argv[1], sys.argv[2:])
