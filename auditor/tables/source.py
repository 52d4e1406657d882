"""Where a table's rows are: one source for every reader, with Spark or without.

Two layouts hold the same tables: a directory of Parquet parts per table
(``ingest``, ``scan``: :class:`ParquetTables`) and a Delta table per table (the batch
job's warehouse, ``WAREHOUSE/tables/NAME``: :class:`DeltaTables`). A Delta table's
directory also holds the Parquet files of older versions (until VACUUM), so reading it
as plain Parquet would mix old and new rows: its current files come from its log (the
``deltalake`` library without Spark, Delta's own reader with it).

Each source gives a table as a Spark DataFrame (:meth:`ParquetTables.frame`: the audit),
a small table's rows as dicts (:meth:`ParquetTables.rows`: the inventory, checkpoints)
and its row count; the readers without Spark (``timeline``, ``coordinator``, ``tables``)
take a table as a ``pyarrow`` dataset (:func:`arrow_dataset`). The cluster key and the
live-log filter are applied over these by :mod:`auditor.model.clusters` and
:mod:`auditor.model.livelog`, in one place each.
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path


def is_delta(path: str | Path) -> bool:
    return (Path(path) / "_delta_log").is_dir()


def arrow_dataset(root: str | Path, name: str):
    """Table ``name`` under ``root`` as a ``pyarrow.dataset.Dataset`` (the current
    version of a Delta table), or None when there is no such table."""
    import pyarrow.dataset as ds

    path = Path(root) / name
    if not path.is_dir():
        return None
    if is_delta(path):
        from deltalake import DeltaTable

        return DeltaTable(str(path)).to_pyarrow_dataset()
    return ds.dataset(str(path), format="parquet", exclude_invalid_files=True)


def small_rows(root: str | Path, name: str, columns: tuple[str, ...]) -> list[dict] | None:
    """The rows of a small table (the inventory, checkpoints) under ``root`` as dicts, with those of
    ``columns`` it has; None when the table is missing. Raises RuntimeError naming the table when it
    cannot be read."""
    try:
        d = arrow_dataset(root, name)
        if d is None:
            return None
        return d.to_table(columns=[c for c in columns if c in d.schema.names]).to_pylist()
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) for a bad footer
        raise RuntimeError(f"{Path(root) / name}: unreadable table: {exc}") from exc


def _parquet_schema(path: Path):
    """The Spark schema of a table directory, from one part file's footer read on
    the driver: every part of a table has the writer's schema, and Spark would
    otherwise run a job to infer it at every read. None if no part file is readable
    (Spark then infers it, or reports the directory)."""
    try:
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import from_arrow_schema

        part = next(p for p in sorted(path.iterdir()) if p.suffix == ".parquet" and not p.name.startswith(("_", ".")))
        return from_arrow_schema(pq.read_schema(part))
    except (OSError, StopIteration, ValueError, TypeError):
        return None


class ParquetTables:
    """An ingest's tables: a directory of Parquet parts per table under ``root``, and its
    manifest (``_ingest.json``: the row count of every table, written with them)."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self._frames: dict[str, object] = {}

    def frame(self, spark, name: str):
        """Table ``name`` as a DataFrame, read once (its schema from a part's footer: no Spark job)."""
        if name not in self._frames:
            path = self.root / name
            schema = _parquet_schema(path)
            reader = spark.read if schema is None else spark.read.schema(schema)
            self._frames[name] = reader.parquet(str(path))
        return self._frames[name]

    def rows(self, spark, name: str, columns: tuple[str, ...]) -> list[dict] | None:
        """A small table's rows with those of ``columns`` it has (pyarrow, no Spark job); None when missing."""
        return small_rows(self.root, name, columns)

    @cached_property
    def manifest(self) -> dict:
        """The ingest manifest; {} if there is none (hand-made tables)."""
        m = self.root / "_ingest.json"
        return json.loads(m.read_text()) if m.exists() else {}

    def counts(self, spark) -> dict[str, int]:
        """Row counts known without reading the tables: the manifest's ({} without one)."""
        return self.manifest.get("tables", {})

    def has_rows(self, spark, name: str) -> bool:
        known = self.counts(spark)
        if name in known:
            return known[name] > 0
        return (self.root / name).exists() and not self.frame(spark, name).limit(1).isEmpty()


class DeltaTables(ParquetTables):
    """A warehouse's Delta tables (``uri``: local or a store's), each read at one version for the
    whole audit: the version current when it is first asked for. Tables the batch job writes use
    no reader features (reader protocol 1: no deletion vectors, no column mapping), so that
    version is exactly its list of Parquet files, which are then scanned like an ingest's
    (without a Delta file-index job per query), and counted and read small from their footers
    when local; a table that does use reader features is read through Delta."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.uri = uri
        self._files: dict[str, list[str]] = {}  # table -> its pinned Parquet files, when they are local
        self._counts: dict[str, int] = {}

    @cached_property
    def manifest(self) -> dict:
        return {}  # the warehouse keeps its own ledger, not an ingest manifest

    def frame(self, spark, name: str):
        if name not in self._frames:
            self._frames[name] = self._pinned(spark, name, "/".join([self.uri.rstrip("/"), name]))
        return self._frames[name]

    def rows(self, spark, name: str, columns: tuple[str, ...]) -> list[dict] | None:
        """The small tables at the pinned version: pyarrow over their local Parquet files (no
        Spark job), else through Spark (one job each); None when there is no such table."""
        try:
            df = self.frame(spark, name)
        except Exception:  # noqa: BLE001 - no such Delta table
            return None
        cols = [c for c in columns if c in df.columns]
        if name in self._files:
            import pyarrow.parquet as pq

            paths = self._files[name]
            return pq.read_table(paths, columns=cols).to_pylist() if paths else []
        return [r.asDict() for r in df.select(*cols).collect()]

    def counts(self, spark) -> dict[str, int]:
        """Rows of the tables counted so far (each counted once, when first asked), and always
        of ``batches``: the audit asks for them first, to choose between the small-input settings
        and Spark's own (:func:`auditor.perf.tuning.small_audit`). Without that count every
        warehouse was audited rule by rule with a large input's settings: 58 Spark jobs for two
        rules over the six files of tests/test_batch_job.py, 15 with it (bench/JOURNAL.md, `batch.py`)."""
        self.has_rows(spark, "batches")
        return dict(self._counts)

    def has_rows(self, spark, name: str) -> bool:
        """Counted from the Parquet footers of local pinned files (no Spark job), else by Spark."""
        if name not in self._counts:
            df = self.frame(spark, name)
            if name in self._files:
                import pyarrow.parquet as pq

                self._counts[name] = sum(pq.ParquetFile(p).metadata.num_rows for p in self._files[name])
            else:
                self._counts[name] = df.count()
        return self._counts[name] > 0

    def _pinned(self, spark, name: str, uri: str):
        from delta.tables import DeltaTable

        df = DeltaTable.forPath(spark, uri).toDF()
        if _reader_version(spark, uri) != 1:
            return df
        files = df.inputFiles()
        local = [_local_file(f) for f in files]
        if all(p is not None for p in local):
            self._files[name] = local
        if not files:
            return spark.createDataFrame([], df.schema)
        return spark.read.schema(df.schema).parquet(*files)


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
