"""The driver JVM's class-data sharing archive (auditor/perf/jvmcache.py): built by a
real training run, mapped by a later session's real JVM, and never half-written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from auditor.perf import jvmcache
from conftest import PROJECT, SAMPLE_LOGS

# a child that starts an embedded session the way the CLI does and reports nothing itself:
# the JVM's class-loading log says where each class came from
_START = ("from auditor.spark.session import get_spark\n"
          "s = get_spark(delta=False)\n"
          "s.range(3).count()\n"
          "s.stop()\n")


def _classes_from_archive(env: dict, tmp_path) -> tuple[int, int]:
    log = tmp_path / f"classload-{len(list(tmp_path.iterdir()))}.log"
    env = {**env, "JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={log}", "PYTHONPATH": str(PROJECT)}
    proc = subprocess.run([sys.executable, "-c", _START], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = log.read_text().splitlines()
    mapped = sum("source: shared objects file (top)" in ln for ln in lines)
    return mapped, len(lines)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("cds")
    env = {**os.environ, jvmcache.CDS_DIR_ENV: str(d)}
    env.pop(jvmcache.CDS_ENV, None)
    proc = subprocess.run([sys.executable, "-m", "auditor.perf.jvmcache", str(SAMPLE_LOGS / "hanging-late-write")],
                          env={**env, "PYTHONPATH": str(PROJECT)}, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return d, env


def test_a_training_run_leaves_exactly_the_fingerprinted_archive(built, monkeypatch):
    d, _ = built
    monkeypatch.setenv(jvmcache.CDS_DIR_ENV, str(d))
    path = jvmcache.archive_path()
    assert sorted(p.name for p in d.iterdir()) == [path.name]  # no temporary file left beside it
    assert path.stat().st_size > 10_000_000  # thousands of Spark classes, not an empty file
    assert jvmcache.driver_java_options().startswith(f"-XX:SharedArchiveFile={path} ")


def test_a_later_session_maps_spark_classes_from_it(built, tmp_path):
    _, env = built
    mapped, loaded = _classes_from_archive(env, tmp_path)
    assert mapped > 5000, f"{mapped} of {loaded} classes came from the archive"
    off, _ = _classes_from_archive({**env, jvmcache.CDS_ENV: "0"}, tmp_path)
    assert off == 0  # TXN_AUDIT_CDS=0: nothing mapped


def test_no_archive_for_another_pyspark_or_java(built, monkeypatch, tmp_path):
    d, _ = built
    monkeypatch.setenv(jvmcache.CDS_DIR_ENV, str(d))
    here = jvmcache.fingerprint()
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", pyspark.__version__ + ".post1")
    assert jvmcache.fingerprint() != here
    assert jvmcache.driver_java_options() == ""  # an upgrade finds no archive (a new one is built)
    monkeypatch.undo()
    monkeypatch.setenv(jvmcache.CDS_DIR_ENV, str(d))
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path.parent))
    monkeypatch.setattr(jvmcache, "_java", lambda: str(java))
    assert jvmcache.fingerprint() not in (None, here)


def test_a_killed_training_run_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(jvmcache.CDS_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(jvmcache.CDS_ENV, raising=False)
    # killed (with its driver JVM) long before the JVM would write the archive at exit
    assert jvmcache.build([str(SAMPLE_LOGS / "hanging-late-write")], timeout=4) is None
    assert list(tmp_path.iterdir()) == []
    assert jvmcache.driver_java_options() == ""
    assert subprocess.run(["pgrep", "-f", f"ArchiveClassesAtExit={tmp_path}"], capture_output=True).returncode == 1
