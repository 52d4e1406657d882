"""A class-data sharing (CDS) archive of the Spark driver JVM's classes.

Why: a ``txn-audit scan`` of a small dump is mostly a cold JVM at work. Before
it runs a query the driver loads, parses and verifies about 15,000 classes from
PySpark's jars (Spark core, Catalyst, Parquet, Netty, Scala's library), the
same ones every run. HotSpot can map such classes ready-made from an archive
file (dynamic archives, JDK 13+: ``-XX:ArchiveClassesAtExit`` writes the classes
one run loaded when its JVM exits, ``-XX:SharedArchiveFile`` maps them in later
runs).

How it is kept:

* The archive lives in the virtualenv's ``share/txn-audit/`` (``$TXN_AUDIT_CDS_DIR``
  names another directory). Its file name carries a fingerprint of what it is
  valid for (the ``java`` binary, PySpark's version and jar list): after an
  upgrade of either, no archive is found until it is built again.
* :func:`build` (``python -m auditor.perf.jvmcache CAPTURE_DIR``; ``make
  setup`` runs it on a shipped sample capture) runs an ingest and an audit in a
  child process (:mod:`auditor.cli.jvmcache_train`) whose driver JVM writes
  its classes at exit (about a minute:
  writing the archive costs HotSpot some 30 s, which is why no user command
  trains it on the side), into a temporary name renamed into place only when
  the JVM exited cleanly. A partial archive is never under the final name.
* Every embedded session maps it when it exists (:func:`driver_java_options`).

Nothing depends on it for correctness: HotSpot validates the archive's header
and class path itself and, under the default ``-Xshare:auto``, runs without it
when they do not match (its log lines about that are turned off).
``TXN_AUDIT_CDS=0`` (or ``TXN_AUDIT_DISABLE=jvmcache``, :mod:`auditor.perf`) turns it off. A driver JVM started by ``spark-submit`` is
already running: nothing is added there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sys
import subprocess
from pathlib import Path

from auditor.perf import enabled

CDS_DIR_ENV = "TXN_AUDIT_CDS_DIR"
CDS_ENV = "TXN_AUDIT_CDS"  # "0": neither map nor train an archive
# HotSpot's notes about classes it skips or an archive it cannot use: not for a user's terminal
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off -Xlog:class+path=off"


def archive_dir() -> Path:
    return Path(os.environ.get(CDS_DIR_ENV) or Path(sys.prefix) / "share" / "txn-audit")


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    cand = Path(home) / "bin" / "java" if home else None
    found = str(cand) if cand is not None and cand.exists() else shutil.which("java")
    return os.path.realpath(found) if found else None


def fingerprint() -> str | None:
    """What an archive is valid for: the java binary (path, size, mtime) and PySpark's
    version and jars (names and sizes). None without java or PySpark."""
    java = _java()
    if java is None:
        return None
    try:
        import pyspark

        jars_dir = Path(pyspark.__file__).parent / "jars"
        jars = sorted((e.name, e.stat().st_size) for e in os.scandir(jars_dir) if e.name.endswith(".jar"))
        st = os.stat(java)
    except (ImportError, OSError):
        return None
    key = repr((java, st.st_size, st.st_mtime_ns, pyspark.__version__, jars))
    return f"spark-{pyspark.__version__}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def archive_path() -> Path | None:
    fp = fingerprint()
    return archive_dir() / f"{fp}.jsa" if fp else None


def driver_java_options() -> str:
    """The options that map this installation's archive into a new embedded session's
    driver JVM; '' when there is none (or ``TXN_AUDIT_CDS=0``)."""
    if os.environ.get(CDS_ENV) == "0" or not enabled("jvmcache"):
        return ""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def build(inputs: list[str], *, timeout: float = 900) -> Path | None:
    """Build the archive: an ingest and an audit of ``inputs`` (a small capture) in a
    child process whose driver JVM archives the classes it loaded as it exits. Returns
    the archive's path; None when it could not be built (the reason on stderr)."""
    if os.environ.get(CDS_ENV) == "0":
        return None
    path = archive_path()
    if path is None:
        print("jvmcache: no java or PySpark: no archive built", file=sys.stderr)
        return None
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.jsa")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)
    except OSError as exc:
        print(f"jvmcache: cannot write {path.parent}: {exc.strerror or exc}: no archive built", file=sys.stderr)
        return None
    # the training run maps no older archive; its driver JVM writes to the pipes read below, not
    # to a log file (auditor.spark.session), so that their end is the JVM's exit, after the archive is written
    env = {**os.environ, CDS_ENV: "0", "TXN_AUDIT_VERBOSE": "1"}
    cmd = [sys.executable, "-m", "auditor.cli.jvmcache_train", str(tmp), *inputs]
    # its own process group: a timeout kills the child's driver JVM too, before it can write
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        # the child's driver JVM shares its stdout/stderr: reading them to the end waits for the
        # JVM's exit, when the archive is written
        _, err = proc.communicate(timeout=timeout)
        if proc.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
            last = (err or "").strip().splitlines()[-1:] or ["no archive written"]
            print(f"jvmcache: the training run failed (exit status {proc.returncode}): {last[0]}", file=sys.stderr)
            return None
        os.replace(tmp, path)
        return path
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        print(f"jvmcache: the training run took over {timeout:.0f} s: no archive built", file=sys.stderr)
        return None
    finally:
        tmp.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m auditor.perf.jvmcache CAPTURE_DIR...", file=sys.stderr)
        return 2
    path = build(argv)
    if path is not None:
        print(f"jvmcache: {path} ({path.stat().st_size / 1e6:.0f} MB)", file=sys.stderr)
    return 0  # an optimisation: its absence is never an error


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
