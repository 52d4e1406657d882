"""Shared test helpers."""

from __future__ import annotations

import io
from pathlib import Path


def _find_shared() -> Path:
    """``shared/`` sits beside the clone (CI and developer machines alike)."""
    import os

    env = os.environ.get("TXN_AUDIT_SHARED")
    if env:
        return Path(env)
    for parent in Path(__file__).resolve().parents:
        cand = parent / "shared" / "real_logs"
        if cand.is_dir():
            return parent / "shared"
    return Path(__file__).resolve().parents[2] / "shared"


SHARED = _find_shared()
# Real Kafka files collected from public repositories (see SOURCES.md there).
# Tests read them in place; they are never copied into the project.
REAL_LOGS = SHARED / "real_logs"
PROJECT = Path(__file__).resolve().parents[1]
SAMPLE_LOGS = PROJECT / "sample_logs"


class CountingReader(io.BytesIO):
    """An in-memory file that remembers its largest ``read()``: lets tests check
    that a decoder streams a file in bounded chunks instead of reading it whole."""

    max_read = 0

    def read(self, size=-1):
        out = super().read(size)
        self.max_read = max(self.max_read, len(out))
        return out

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    """One embedded Spark session for the whole test run (starting one costs ~5 s). Its driver gets
    4 GiB, not the product's 2 GiB default: one JVM holds ~900 tests' worth of plans and caches, and
    test_scenarios (every capture of sample_logs/ in one audit, three ways) ran out of a 2 GiB heap
    at the end of the full run (Task serialization: OutOfMemoryError) while passing alone."""
    from auditor.engine.session import get_spark

    session = get_spark("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "4g"})
    yield session
    session.stop()
