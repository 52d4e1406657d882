"""Shared test helpers."""

from __future__ import annotations

import io
from pathlib import Path


PROJECT = Path(__file__).resolve().parents[1]


def _real_logs() -> Path:
    """Where the external corpus of real Kafka files is: ``$TXN_AUDIT_REAL_LOGS``, else
    ``$TXN_AUDIT_SHARED/real_logs`` (the older setting, kept), else ``../shared/real_logs`` beside
    the clone. ``.ci/run`` sets the first explicitly. The corpus is not part of the project: real
    files collected from public repositories (see SOURCES.md there), read in place, never copied in."""
    import os

    env = os.environ.get("TXN_AUDIT_REAL_LOGS")
    if env:
        return Path(env)
    env = os.environ.get("TXN_AUDIT_SHARED")
    if env:
        return Path(env) / "real_logs"
    return PROJECT.parent / "shared" / "real_logs"


REAL_LOGS = _real_logs()
#: whether the external corpus is there: tests marked ``real_logs`` are deselected without it
#: (``pytest_collection_modifyitems`` below); the tests that also cover ``sample_logs/``
#: (test_dump_parity, test_broker_oracle) then run on ``sample_logs/`` alone
HAVE_REAL_LOGS = REAL_LOGS.is_dir()
SHARED = REAL_LOGS.parent
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
    6 GiB, not the product's 2 GiB default: one JVM holds ~1,400 tests' worth of plans and caches,
    and test_scenarios (every capture of sample_logs/ in one audit, three ways, and every partition's
    plot series collected at once) ran out of a 2 GiB, then a 4 GiB heap late in the full run
    (OutOfMemoryError) while passing alone."""
    from auditor.spark.session import get_spark

    session = get_spark("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "6g"})
    yield session
    session.stop()


#: tests deselected because the external corpus is missing (for the one summary line)
_DESELECTED_REAL: list = []


def pytest_collection_modifyitems(config, items):
    """Without the external corpus, deselect the tests marked ``real_logs`` (per test or per module):
    they assert facts of those files, which a clone without ``../shared`` cannot check. Deselected,
    not skipped: nothing is reported as a pass-by-skip, and ``sample_logs/`` (shipped) is still tested."""
    if HAVE_REAL_LOGS:
        return
    keep = [it for it in items if it.get_closest_marker("real_logs") is None]
    if len(keep) == len(items):
        return
    _DESELECTED_REAL[:] = [it for it in items if it.get_closest_marker("real_logs") is not None]
    config.hook.pytest_deselected(items=_DESELECTED_REAL)
    items[:] = keep


def pytest_terminal_summary(terminalreporter):
    """One line that says which corpus is missing and where to put it."""
    if _DESELECTED_REAL:
        terminalreporter.write_line(
            f"real_logs: {len(_DESELECTED_REAL)} tests deselected: the corpus of real Kafka files is missing at "
            f"{REAL_LOGS} (put it at ../shared/real_logs beside the clone or set TXN_AUDIT_REAL_LOGS); "
            "sample_logs/ is tested without it", yellow=True)
