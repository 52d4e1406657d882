"""The rule catalog over the warehouse's Delta tables.

Rules are written against :class:`auditor.engine.context.AuditContext`; this
context only changes where tables come from (Delta instead of Parquet
directories) and where row counts come from (the tables themselves: there is no
ingest manifest). Everything else — shared views, reference time, options — is
the one the ``audit`` command uses, so both report the same findings for the
same data.
"""

from __future__ import annotations

from typing import Callable

from auditor.batch.deltaio import join
from auditor.engine.context import AuditContext, AuditOptions
from auditor.engine.runner import AuditResult, audit


class DeltaAuditContext(AuditContext):
    """Each table is read at one Delta version for the whole audit: the version
    current when the rules first ask for it. Tables written by the batch job use
    no reader features (reader protocol 1: no deletion vectors, no column
    mapping), so that version is exactly its list of Parquet files, which the
    rules then scan like the ``audit`` command scans its Parquet directories
    (without a Delta file-index job per query); a table that does use reader
    features is read through Delta."""

    def __init__(self, spark, tables_uri: str, options: AuditOptions | None = None) -> None:
        super().__init__(spark, tables_uri, options)
        self.tables_uri = tables_uri
        self._frames: dict[str, object] = {}
        self._files: dict[str, list[str]] = {}  # table -> its pinned Parquet files, when they are local
        self._counts: dict[str, int] = {}

    def load(self, name: str):
        if name not in self._frames:
            self._frames[name] = self._pinned(name, join(self.tables_uri, name))
        return self._frames[name]

    def small_rows(self, name: str, columns: tuple[str, ...]) -> list[dict] | None:
        """The small tables at the pinned version: read with pyarrow from their Parquet files
        when those are local, as the ``audit`` command reads its tables (no Spark job), else
        through Spark (one job each)."""
        try:
            df = self.load(name)
        except Exception:  # noqa: BLE001 - no such Delta table
            return None
        cols = [c for c in columns if c in df.columns]
        if name in self._files:
            import pyarrow.parquet as pq

            paths = self._files[name]
            return pq.read_table(paths, columns=cols).to_pylist() if paths else []
        return [r.asDict() for r in df.select(*cols).collect()]

    def _pinned(self, name: str, uri: str):
        from delta.tables import DeltaTable

        df = DeltaTable.forPath(self.spark, uri).toDF()
        if _reader_version(self.spark, uri) != 1:
            return df
        files = df.inputFiles()
        local = [_local_file(f) for f in files]
        if all(p is not None for p in local):
            self._files[name] = local
        if not files:
            return self.small_df([], df.schema)
        return self.spark.read.schema(df.schema).parquet(*files)

    @property
    def table_rows(self) -> dict[str, int]:
        """Rows of the tables counted so far (each counted once, when a rule first asks), and
        always of ``batches``: the audit asks for them first, to choose between the small-input
        settings and Spark's own (:func:`auditor.perf.tuning.small_audit`), as it does for
        ``ingest``'s tables from their manifest. Without that count every warehouse was audited
        rule by rule with a large input's settings: 58 Spark jobs for two rules over the six
        files of tests/test_batch_job.py, 15 now (bench/JOURNAL.md, `batch.py`)."""
        self.has_rows("batches")
        return dict(self._counts)

    def has_rows(self, name: str) -> bool:
        """Counted from the Parquet footers of local pinned files (no Spark job), else by Spark."""
        if name not in self._counts:
            df = self.load(name)
            if name in self._files:
                import pyarrow.parquet as pq

                self._counts[name] = sum(pq.ParquetFile(p).metadata.num_rows for p in self._files[name])
            else:
                self._counts[name] = df.count()
        return self._counts[name] > 0


def _local_file(uri: str) -> str | None:
    """The local path of a ``file:`` URI as Spark lists a table's files; None for another scheme."""
    from urllib.parse import unquote, urlparse

    u = urlparse(uri)
    return unquote(u.path) if u.scheme == "file" else None


def _reader_version(spark, uri: str) -> int | None:
    """The table's minimum reader protocol version, from the snapshot Delta has
    just loaded (no Spark job); None if it cannot be told (read through Delta then)."""
    try:
        log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri)
        return int(log.unsafeVolatileSnapshot().protocol().minReaderVersion())
    except Exception:  # noqa: BLE001 - an internal API: any surprise means "use Delta"
        return None


def run_rules(spark, tables_uri: str, options: AuditOptions | None = None, only: list[str] | tuple[str, ...] = (),
              progress: Callable[[str, int, int], None] | None = None) -> AuditResult:
    """The rule catalog (or the rules in ``only``) over the warehouse's Delta
    tables: the ``audit`` command's loop with a :class:`DeltaAuditContext`."""
    return audit(spark, tables_uri, options=options, only=only, progress=progress, context=DeltaAuditContext)
