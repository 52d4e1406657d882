"""The one SparkSession factory used by the CLI, the scheduled job and the tests.

Default is an embedded ``local[*]`` session; ``--master`` and ``--conf`` (or
``spark-submit``, which pre-creates the session) select a real cluster. The
code that runs on executors only needs the ``auditor`` package importable there
(installed in the executor environment or shipped with ``--py-files``).

Delta Lake (the scheduled ``txn-audit batch`` job's table format): when the
Delta jars are present (``scripts/delta/fetch.sh``, run by ``make setup``, puts
them in ``build/delta/jars``; ``TXN_AUDIT_DELTA_JARS`` names another directory)
an embedded session gets them on ``spark.jars`` with Delta's SQL extension and
catalog. Under ``spark-submit`` the JVM is already running, so the jars must
come from ``--jars``/``--packages``; the Delta settings are added when the
classes are loadable. Parquet-only commands work either way.

What spares a session work (the class-data sharing archive its driver JVM maps, the
cached Py4J look-ups, the settings of a small input) is :mod:`auditor.perf`'s: applied
here, documented and measured there.

Logs: an embedded session's driver JVM (the launcher, HotSpot, log4j, Hadoop, the Python
workers it starts) writes its stdout and stderr to a log file of the run
(:func:`spark_log_path`, under :func:`log_dir`), not to the terminal: the tool's stderr holds
the tool's own lines only. :func:`set_verbose` (``-v``) or ``TXN_AUDIT_VERBOSE=1`` sends them
to stderr instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

from auditor.errors import EngineStartError
from auditor.perf.jvmcache import driver_java_options
from auditor.perf.preload import start as preload_start
from auditor.perf.tuning import local_java_options, session_conf, small_input_java_options

DELTA_VERSION = "4.0.1"  # keep in sync with delta-spark in pyproject.toml and scripts/delta/fetch.sh
DELTA_JARS_ENV = "TXN_AUDIT_DELTA_JARS"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CONF = {
    "spark.sql.extensions": DELTA_EXTENSION,
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
_DELTA_JAR_NAMES = (f"delta-spark_2.13-{DELTA_VERSION}.jar", f"delta-storage-{DELTA_VERSION}.jar")

_LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.sql.sources.partitionOverwriteMode": "static",
    "spark.python.worker.reuse": "true",
    "spark.ui.showConsoleProgress": "false",
    # Spark keeps each SQL execution's description for its UI (1,000 by default, even with the UI
    # off), and an audit's plans describe themselves in up to 1.3 MB of text (14 executions, 7 MB
    # for six captures): a long-lived embedded driver (a test run, a notebook) filled a 4 GiB heap
    # with them (GC overhead limit exceeded). The embedded tool reads none; under spark-submit the
    # cluster's UI settings are the user's.
    "spark.sql.ui.retainedExecutions": "20",
    # and each execution describes its plan once as it starts (explainString, for the UI's listener): the
    # verdicts' plan over every capture of sample_logs/ prints in ~250 MB (a persisted view is printed again
    # wherever it is read), which a test run's long-lived 6 GiB driver could not build (OutOfMemoryError in
    # StringConcat, CI at 954b417). One MB of it says what a person reads; nothing of ours parses it.
    "spark.sql.maxPlanStringLength": "1000000",
}


VERBOSE_ENV = "TXN_AUDIT_VERBOSE"
LOG_DIR_ENV = "TXN_AUDIT_LOG_DIR"
KEEP_LOGS = 20  # the newest run logs kept in log_dir()
_log_path: Path | None = None


def set_verbose(on: bool = True) -> None:
    """``-v``: the driver JVM's output (launcher, log4j, Hadoop) goes to stderr, not to the run's log."""
    if on:
        os.environ[VERBOSE_ENV] = "1"


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def log_dir() -> Path:
    """Where the runs' JVM logs go: ``$TXN_AUDIT_LOG_DIR``, else ``$XDG_CACHE_HOME/txn-audit/logs``
    (``~/.cache/txn-audit/logs``)."""
    env = os.environ.get(LOG_DIR_ENV)
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "txn-audit" / "logs"


def spark_log_path() -> Path | None:
    """The log file this process's driver JVM writes to (None: no JVM started here, or ``-v``)."""
    return _log_path


def _open_log():
    """A new log file for this run (the oldest beyond :data:`KEEP_LOGS` removed), or None if
    no log directory can be written (the JVM then writes to stderr, as with ``-v``)."""
    import time

    global _log_path
    d = log_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        old = sorted(d.glob("spark-*.log"), key=lambda p: p.stat().st_mtime)
        for p in old[: max(0, len(old) - KEEP_LOGS + 1)]:
            p.unlink(missing_ok=True)
        path = d / f"spark-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
        fh = open(path, "ab", buffering=0)
    except OSError:
        return None
    _log_path = path
    return fh


def _start_failure(exc: BaseException) -> str:
    """One line for a driver JVM that did not start: the error it wrote in the run's log
    (spark-submit's "Error: ..." before its usage text, HotSpot's "Error occurred during
    initialization of VM" and the reason on the next line), else PySpark's error."""
    lines: list[str] = []
    if _log_path is not None:
        try:
            with open(_log_path, errors="replace") as f:
                lines = [ln.strip() for ln in f.read(65536).splitlines() if ln.strip()]
        except OSError:
            pass
    for i, ln in enumerate(lines):
        if ln.startswith("Error"):
            said = ln
            if ln.startswith("Error occurred") and i + 1 < len(lines):  # the reason follows
                said = f"{ln}: {lines[i + 1]}"
            elif ln.startswith("Error: Could not create the Java Virtual Machine") and i:  # it precedes
                said = f"{lines[i - 1]} ({ln[len('Error: '):].rstrip('.')})"
            return f"the Spark driver JVM did not start: {said[:400]}"
    return f"the Spark driver JVM did not start: {type(exc).__name__}: {exc}"


def _launch_quiet(master: str, app_name: str, settings: Mapping[str, str]) -> None:
    """Start the driver JVM (the Py4J gateway) with its stdout and stderr in the run's log, the
    way ``SparkContext`` would start it (same ``spark-submit --conf`` settings) but with
    ``popen_kwargs``: the launcher's and HotSpot's own lines ("Using incubator modules") and
    log4j's console output then never reach the terminal. No-op when a gateway already runs."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway:
            return
        fh = _open_log()
        if fh is None:
            return
        conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name)
        for k, v in settings.items():
            conf.set(k, v)
        preload = preload_start()  # while this thread waits for the JVM to start
        try:
            SparkContext._gateway = launch_gateway(conf, popen_kwargs={"stdout": fh, "stderr": fh})
        except Exception as exc:  # noqa: BLE001 - PySpark's JAVA_GATEWAY_EXITED and the launcher's own
            raise EngineStartError(_start_failure(exc)) from None
        finally:
            fh.close()  # the JVM holds its own descriptors
            if preload is not None:
                preload.join()
        SparkContext._jvm = SparkContext._gateway.jvm


def delta_jars_dir() -> Path:
    """Where the Delta jars are looked for: ``$TXN_AUDIT_DELTA_JARS`` or ``<project>/build/delta/jars``."""
    env = os.environ.get(DELTA_JARS_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[2] / "build" / "delta" / "jars"


def delta_jars() -> list[str]:
    """Paths of the Delta jars (delta-spark, delta-storage), or [] if either is missing."""
    d = delta_jars_dir()
    paths = [d / n for n in _DELTA_JAR_NAMES]
    return [str(p) for p in paths] if all(p.is_file() for p in paths) else []


def delta_missing_message() -> str:
    d = delta_jars_dir()
    submit = (f"pass --jars {d}/{_DELTA_JAR_NAMES[0]},{d}/{_DELTA_JAR_NAMES[1]} "
              f"(or --packages io.delta:delta-spark_2.13:{DELTA_VERSION} --exclude-packages org.antlr:antlr4-runtime) "
              f"to spark-submit")
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # the JVM was started by spark-submit, without them
        return f"Delta Lake is not available in this Spark session (started by spark-submit): {submit}."
    where = "were found, but this session was created without them" if delta_jars() else f"were not found in {d}"
    return (
        f"Delta Lake is not available in this Spark session: the jars {' and '.join(_DELTA_JAR_NAMES)} {where}. "
        f"Run `make setup` (or `bash scripts/delta/fetch.sh`), or point {DELTA_JARS_ENV} at a directory holding "
        f"them; with spark-submit, {submit}."
    )


def _jvm_can_load(class_name: str) -> bool:
    """Under spark-submit: is ``class_name`` on the (already running) driver JVM's classpath?"""
    from pyspark import SparkContext

    try:
        SparkContext._ensure_initialized()
        return bool(SparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(class_name))
    except Exception:  # noqa: BLE001 - no gateway: treat as not loadable
        return False


def has_delta(spark) -> bool:
    """Can ``spark`` read and write Delta tables (classes loadable, extension configured)?"""
    try:
        ext = spark.conf.get("spark.sql.extensions", "") or ""
        return DELTA_EXTENSION in ext and bool(
            spark.sparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(DELTA_EXTENSION))
    except Exception:  # noqa: BLE001
        return False


def _with_delta(settings: dict[str, str], jars: list[str]) -> dict[str, str]:
    """``settings`` plus the Delta jars and SQL settings (user-given values win)."""
    out = dict(settings)
    if jars:
        given = [j for j in out.get("spark.jars", "").split(",") if j]
        out["spark.jars"] = ",".join(given + [j for j in jars if j not in given])
    for k, v in DELTA_CONF.items():
        if k == "spark.sql.extensions" and out.get(k) and DELTA_EXTENSION not in out[k]:
            out[k] = f"{out[k]},{v}"
        else:
            out.setdefault(k, v)
    return out


def get_spark(master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str = "txn-audit",
              delta: bool = True, small_input: bool = False):
    """Return the active session if one exists (spark-submit, tests), else build one.

    ``delta=False``: a new embedded session without the Delta jars and extension
    (the commands that read and write Parquet only; the JVM starts about a second
    sooner). ``small_input``: the caller knows its input is small (``scan``,
    ``ingest`` of a small input, ``audit`` of up to ``C1_AUDIT_BATCHES`` batches): an
    embedded driver JVM then compiles with C1 only (:data:`auditor.perf.tuning.SMALL_INPUT_JAVA_OPTIONS`).
    Every embedded local driver gets :data:`auditor.perf.tuning.LOCAL_JAVA_OPTIONS`."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return _driver_ready(active)
    if master is None and "PYSPARK_GATEWAY_PORT" in os.environ:
        # launched by spark-submit: its --master/--conf already configure the JVM
        builder = SparkSession.builder.appName(app_name)
        settings = {**session_conf(), **(conf or {})}
        if _jvm_can_load(DELTA_EXTENSION):  # --jars/--packages brought Delta
            from pyspark import SparkConf

            submitted = SparkConf()  # what spark-submit's --conf set: kept, Delta's added
            for k in DELTA_CONF:
                if k not in settings and submitted.contains(k):
                    settings[k] = submitted.get(k)
            settings = _with_delta(settings, [])
        for k, v in settings.items():
            builder = builder.config(k, v)
        return _driver_ready(builder.getOrCreate())
    # executors must run the same interpreter as the driver (our venv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    resolved = master or os.environ.get("TXN_AUDIT_SPARK_MASTER", "local[*]")
    if resolved.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    builder = builder.master(resolved)
    settings = {**_LOCAL_DEFAULTS, **session_conf()}
    if resolved.startswith("local"):
        # one shuffle partition per core: per-task overhead dominates on a single host
        settings["spark.sql.shuffle.partitions"] = str(os.cpu_count() or 2)
    settings.update(conf or {})
    jars = delta_jars() if delta else []
    if jars:
        settings = _with_delta(settings, jars)
        if resolved.startswith("local"):
            # Delta rebuilds a table's state with this many tasks (default 50, sized for clusters)
            settings.setdefault("spark.databricks.delta.snapshotPartitions", str(os.cpu_count() or 2))
    # the driver JVM maps its classes from this installation's archive (auditor.perf.jvmcache); a local
    # one uses the throughput collector, a small input's compiles with C1 only (auditor.perf.tuning)
    local = resolved.startswith("local")
    user = settings.get("spark.driver.extraJavaOptions")
    extra = [o for o in (driver_java_options(), local_java_options(user or "") if local else "",
                         small_input_java_options() if small_input and local else "") if o]
    if extra:
        settings["spark.driver.extraJavaOptions"] = " ".join(([user] if user else []) + extra)
    for k, v in settings.items():
        builder = builder.config(k, v)
    if not verbose():
        _launch_quiet(resolved, app_name, settings)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - with --verbose the JVM's own lines are above it
        if "JAVA_GATEWAY_EXITED" not in str(exc):
            raise
        raise EngineStartError("the Spark driver JVM did not start (what it said is above)") from None
    spark.sparkContext.setLogLevel(os.environ.get("TXN_AUDIT_SPARK_LOG_LEVEL", "ERROR"))
    return _driver_ready(spark)


def embedded_local(master: str | None = None) -> bool:
    """Will :func:`get_spark` (``master``) give a session whose master is local -- its executors
    in this machine's driver JVM? An active session answers for itself; under spark-submit the
    answer is no (its master is not known before the session is there)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return str(active.sparkContext.master).startswith("local")
    if master is None and "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    return (master or os.environ.get("TXN_AUDIT_SPARK_MASTER", "local[*]")).startswith("local")


def _driver_ready(spark):
    """The driver's side of a session: its JVM look-ups cached (:mod:`auditor.perf.py4jcache`)."""
    from auditor.perf.py4jcache import install

    install(spark.sparkContext)
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
