"""Spark settings chosen from the input size, and the properties that spare Spark work per job.

Spark's defaults are sized for large data: adaptive execution re-plans at every
shuffle (one job per query stage), small sides are broadcast (one job each),
and every stage is compiled to Java byte code. On an interactive scan of a
small dump that overhead is nearly all the time spent: a few thousand rows
need none of it. Audits of at most :data:`SMALL_AUDIT_BATCHES` batches run
under :func:`small_sql_conf` (restored afterwards: the session may be shared),
with the tables read as one partition; larger ones keep Spark's settings. Either way each
rule's query is collected by a :class:`auditor.engine.collect.Pipeline` worker while the next
is built (:mod:`auditor.engine.runner`).

The driver JVM's own settings for a small input are here too (:data:`SMALL_INPUT_JAVA_OPTIONS`,
chosen by ``scan``, ``ingest`` and ``audit`` before Spark starts,
applied by :func:`auditor.spark.session.get_spark`), and so is the one setting every session
gets (:data:`SESSION_CONF`). What else a small input changes lives where it is decided: the
decode's collection to the driver (``auditor.ingest.spark_job.SMALL_INPUT_BYTES``).
Every embedded driver JVM gets :data:`LOCAL_JAVA_OPTIONS` (the throughput collector), and an
audit of at most :data:`C1_AUDIT_BATCHES` batches compiles with C1 only even when it is not small.
Switches (``TXN_AUDIT_DISABLE``, :mod:`auditor.perf`): ``call_site``, ``c1``, ``df_debugging``, ``parallel_gc``.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Iterator, Mapping

from auditor.perf import enabled

# Every session: each DataFrame call would also send its Python call site to the JVM (PySpark's
# DataFrame debugging): three times the Py4J round trips while the rules build their queries.
DF_DEBUGGING_OFF = {"spark.python.sql.dataFrameDebugging.enabled": "false"}

# A small dump's scan runs each of a few thousand Catalyst code paths a handful of times: HotSpot's
# optimising compiler (C2) then spends more CPU compiling them than the audit spends running them,
# and on two cores it takes one away from the work (measured on one capture: the C2 threads used
# 22 of the driver JVM's 41 CPU-s). C1 alone compiles quickly into code that is good enough for
# that; a large input keeps C2, whose code the long scans and sorts need. One compiler thread, not
# HotSpot's two: the second takes CPU from the query building and the tasks for little earlier code
# (alternating runs, idle machine: a scan of one capture 11.05-11.53 -> 10.82-11.01 s in 3 pairs,
# of all sample_logs/ 22.65-22.76 -> 22.38-22.65 s in 3, a 1 M-batch audit 20.70-20.87 -> 20.36 s in 2).
SMALL_INPUT_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1"

# An audit's tables hold their batch count (the ingest manifest), so ``audit`` chooses C1 before its
# JVM starts for more than the small path: measured on bench/audit.py's tables (idle machine, JVM
# CPU-s / wall s), C1 against C2: 1 M batches 30.2 / 19.7 against 44.4 / 24.4, 3 M 59.1 / 34.4
# against 56.4 / 30.7, 10 M 146.1 / 79.8 against 83.6 / 44.9. The compiling C1 saves is a fixed
# ~15 CPU-s; its slower code costs ~7 CPU-s per million batches: C2 won from about 2 M. Since the
# producer state is sorted by a replica id the rows cost C1 less: alternating pairs, wall s,
# C1 against C2: 1 M 13.9 / 14.2 against 19.9 / 18.9, 3 M 21.6 / 21.0 against 24.5 / 24.6, 5 M
# 28.8 / 30.2 against 28.7 / 29.9 (even), 10 M 48.2 against 36.5: C1 up to 4 M.
C1_AUDIT_BATCHES = 4_000_000

# Every embedded driver JVM (not one spark-submit started): the throughput collector. An audit is a
# batch computation whose pauses nobody sees; G1's concurrent marking and refinement threads take
# CPU from the two task threads. Audits of bench/audit.py's tables, alternating (JVM CPU-s / wall s):
# 1 M batches 40.6 / 22.4 and 44.4 / 24.4 with G1 against 37.1 / 20.5 and 40.8 / 22.6 with it;
# 10 M 88.8 / 47.3 against 74.0 / 39.6.
LOCAL_JAVA_OPTIONS = "-XX:+UseParallelGC"


# HotSpot refuses to start with two collectors selected: a user's own choice wins
_COLLECTOR = re.compile(r"-XX:\+Use\w*GC\b")
USER_JVM_OPTION_ENVS = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")


def local_java_options(user_options: str = "") -> str:
    """Every embedded driver JVM's options (:data:`LOCAL_JAVA_OPTIONS`); '' when switched off,
    or when the user already chose a collector (in ``user_options``, the session's
    ``spark.driver.extraJavaOptions``, or the JVM's option variables): HotSpot would refuse
    to start with two."""
    if not enabled("parallel_gc"):
        return ""
    given = " ".join([user_options, *(os.environ.get(e, "") for e in USER_JVM_OPTION_ENVS)])
    return "" if _COLLECTOR.search(given) else LOCAL_JAVA_OPTIONS


def session_conf() -> dict[str, str]:
    """What every session of the tool is given (embedded or under ``spark-submit``)."""
    return dict(DF_DEBUGGING_OFF) if enabled("df_debugging") else {}


def small_input_java_options() -> str:
    """A small input's driver JVM options (:data:`SMALL_INPUT_JAVA_OPTIONS`); '' when switched off."""
    return SMALL_INPUT_JAVA_OPTIONS if enabled("c1") else ""


SMALL_AUDIT_BATCHES = 200_000


def small_audit(table_rows: Mapping[str, object]) -> bool:
    """Does a dump of these table row counts (the ingest manifest's) take the small-input path?"""
    n = table_rows.get("batches")
    return isinstance(n, int) and n <= SMALL_AUDIT_BATCHES


def c1_audit(table_rows: Mapping[str, object]) -> bool:
    """Does the driver JVM of an audit of these table row counts compile with C1 only
    (:data:`C1_AUDIT_BATCHES`)? Unknown counts keep C2."""
    n = table_rows.get("batches")
    return isinstance(n, int) and n <= C1_AUDIT_BATCHES

SMALL_SQL_CONF: dict[str, str] = {
    "spark.sql.adaptive.enabled": "false",  # one job per query, not one per shuffle stage
    "spark.sql.autoBroadcastJoinThreshold": "-1",  # no broadcast jobs...
    "spark.sql.optimizer.disableHints": "true",  # ...not even for hinted joins
    "spark.sql.shuffle.partitions": "1",  # one task per stage
    "spark.sql.codegen.wholeStage": "false",  # interpret: compiling costs more than a few rows take
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    # Constraint propagation is documented as costly on some plans: here it is most of the time of
    # PruneFilters, InferFiltersFromConstraints and EliminateOuterJoin, which prune nothing on rows this few
    "spark.sql.constraintPropagation.enabled": "false",
    # The tables are read as one partition, and an operator over one-partition children needs no
    # shuffle -- but for a join Spark keeps them so only when each side's *estimated* size is at most
    # spark.sql.maxSinglePartitionBytes (EnsureRequirements' preferSinglePartition), and a join's
    # estimate is the product of its sides' (SizeInBytesOnlyStatsPlanVisitor): a few joins of
    # kilobyte tables pass any limit, and both sides are shuffled to one partition again (159
    # exchanges in one capture's audit). The estimates steer nothing else here (no broadcasts,
    # no adaptive execution), so the files' sizes count as nothing and the limit is the largest:
    # 159 -> 77 exchanges; one capture 9.36 -> 9.17 s, all of sample_logs/ 16.9-17.9 -> 16.7-17.1 s.
    "spark.sql.maxSinglePartitionBytes": "8191p",
    "spark.sql.sources.fileCompressionFactor": "1e-9",
    "spark.sql.defaultSizeInBytes": "1",
}

# What Spark records as the "call site" of every RDD a query plans: given as local properties, Spark
# does not compute it. Computing it walks the JVM thread's stack once per RDD (each operator of each
# query): on a small dump's audit, about a tenth of the driver's CPU time on its Py4J threads.
CALL_SITE_SHORT, CALL_SITE_LONG = "callSite.short", "callSite.long"


def small_sql_conf() -> dict[str, str]:
    """The SQL settings of a small dump's audit (:data:`SMALL_SQL_CONF`)."""
    return dict(SMALL_SQL_CONF)


@contextmanager
def call_site(spark, text: str) -> Iterator[None]:
    """Name the call site of the jobs the block starts (this thread's, and a
    :class:`~auditor.engine.collect.Pipeline`'s submitted from it) ``text``; the previous values after."""
    if not enabled("call_site"):
        yield
        return
    sc = spark.sparkContext
    before = {k: sc.getLocalProperty(k) for k in (CALL_SITE_SHORT, CALL_SITE_LONG)}
    for k in before:
        sc.setLocalProperty(k, text)
    try:
        yield
    finally:
        for k, v in before.items():
            sc.setLocalProperty(k, v)  # None removes it


@contextmanager
def sql_conf(spark, conf: Mapping[str, str]) -> Iterator[None]:
    """Run the block with the session's SQL settings ``conf``; the previous values after."""
    before: dict[str, str | None] = {}
    for k, v in conf.items():
        before[k] = spark.conf.get(k, None)
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
