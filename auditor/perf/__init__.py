"""The performance machinery, in one place: what each piece buys, how it is measured, what breaks it.

None of it changes a result: each piece saves time on a path the tool takes anyway, and each
can be switched off for a run with ``TXN_AUDIT_DISABLE=piece,piece`` (``all`` for every one),
which is how ``bench/perf_machinery.py`` measures what it buys today (figures in
bench/README.md, "perf_machinery.py"). A piece that stops paying is removed, not kept.

==================  =====================================================  ==========================================
piece (switch)      what it does, what it buys                             what breaks it on an upgrade
==================  =====================================================  ==========================================
``jvmcache``        :mod:`.jvmcache`: a class-data sharing archive of the  a new JDK or PySpark: the archive's
                    driver JVM's ~15,000 classes, mapped at start-up       fingerprint changes and none is found
                    (trained once by ``make setup``)                       until ``make setup`` trains it again;
                                                                           HotSpot drops an archive it cannot use
``py4jcache``       :mod:`.py4jcache`: the driver's Py4J look-ups          Py4J's ``JVMView``/``JavaClass``/
                    (``jvm.org.apache...``) answered once, not per call    ``JavaPackage`` classes renamed or made
                                                                           slotted (then nothing is cached)
``call_site``       :func:`.tuning.call_site`: the RDD call site given as  Spark's ``callSite.short``/``long``
                    a local property, so Spark does not walk the JVM       property names
                    stack for it per operator
``c1``              :mod:`.tuning`: a small input's driver JVM compiles    HotSpot's flags
                    with C1 only, on one compiler thread (an audit's up
                    to 2 M batches)
``parallel_gc``     :data:`.tuning.LOCAL_JAVA_OPTIONS`: an embedded        HotSpot's flag; a JDK whose default
                    driver JVM uses the throughput collector, not G1       collector changes
``df_debugging``    :data:`.tuning.DF_DEBUGGING_OFF`: PySpark's DataFrame  the setting's name (PySpark 4.0)
                    debugging (a call site sent per DataFrame call) off
``cached_leaf``     :mod:`.cached_leaf`: a persisted view reaches the      Spark-classic internals (``CacheManager.
                    rules as its cache entry alone, so Catalyst does not   lookupCachedData``, ``classic.Dataset.
                    re-analyse the views beneath at every operation        ofRows``): under Spark Connect or after a
                                                                           rename it returns the view as it is
``no_pandas``       :mod:`.no_pandas`: pyarrow's one look for pandas, in   pyarrow asking for pandas elsewhere (then
                    a decode worker and in ``dump``'s table registry,      pandas is imported as before)
                    finds none (no 0.16-0.7 CPU-s import)
``preload``         :mod:`.preload`: PySpark's Py4J converter imports      PySpark's ``NumpyArrayConverter`` no
                    (pandas, numpy) done while the JVM starts              longer importing ``pyspark.testing``
``freed_memory``    :mod:`.memory`: ``dump`` keeps the big buffers it      glibc's ``mallopt`` parameters (a no-op
                    frees (glibc), fewer page faults                       elsewhere)
``dump_split``      :mod:`auditor.dump._split`: ``dump --records`` of      ``os.fork`` (a platform without it: one
                    0.25-64 MiB of many files forks a second process for   process)
                    the later files
``local_decode``    :mod:`auditor.ingest.local_decode`: local files under  ``multiprocessing``'s start methods (then
                    a local master decoded by processes of the driver's,   the platform's default); the Parquet
                    which write the tables' parts themselves (``ingest``   writer's options (pyarrow)
                    starts no JVM; ``scan`` decodes while it starts)
==================  =====================================================  ==========================================

``bench/perf_machinery.py`` measures them (a cold ``scan`` of one capture per run, or audits in
one warm session; each piece off in turn, alternating runs, CPU seconds of the process and its JVM).
Last measured 2026-11-26 (bench/README.md, "perf_machinery.py"), CPU-s a cold scan of a
20-24 CPU-s capture saves: c1 10.3 (load 5-7), jvmcache 6.7, cached_leaf 3.9 (3.4 per warm
audit), py4jcache 3.6, call_site 2.7, no_pandas 0.3 (load 25-36).

Dropped because they no longer paid (load 5-7, 4 cold scans and 8 warm audits each, CPU-s
saved): Py4J releases deferred to the audit's end (-0.41 cold, +0.01 warm), 11 optimizer rules
left out of a small audit (-0.35 cold, -0.06 warm), the "simple" plan rendering of a small
input (-0.47 cold).

This module imports nothing: the decode's Python workers and ``dump`` read it too.
"""

from __future__ import annotations

import os

DISABLE_ENV = "TXN_AUDIT_DISABLE"
PIECES = ("jvmcache", "py4jcache", "call_site", "c1", "parallel_gc", "df_debugging", "cached_leaf", "no_pandas",
          "preload", "freed_memory", "dump_split", "local_decode")


def enabled(piece: str) -> bool:
    """Is ``piece`` on for this process (not named in ``$TXN_AUDIT_DISABLE``, nor ``all``)?"""
    off = os.environ.get(DISABLE_ENV, "")
    if not off:
        return True
    names = {n.strip() for n in off.split(",")}
    return piece not in names and "all" not in names
