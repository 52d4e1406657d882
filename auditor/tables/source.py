"""Where a table's rows are, for the readers that need no Spark.

Two layouts hold the same tables: a directory of Parquet parts per table
(``ingest``, ``scan``) and a Delta table per table (the batch job's warehouse,
``WAREHOUSE/tables/NAME``). A Delta table's directory also holds the Parquet
files of older versions (until VACUUM), so reading it as plain Parquet would
mix old and new rows: its current files come from its log, read with the
``deltalake`` library. Spark readers go through ``AuditContext.load`` (Parquet)
and ``DeltaAuditContext`` (Delta) instead.
"""

from __future__ import annotations

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
