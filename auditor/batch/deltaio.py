"""Warehouse paths and the few Delta operations the batch job is built on.

Every data write is an overwrite *keyed by source file*: ``replaceWhere`` with
``file IN (...)`` deletes the rows those files contributed before and inserts
their new decode in one Delta commit. Redoing the same write (a re-run after a
kill) therefore yields the same table, never duplicates.
"""

from __future__ import annotations

import os
import re

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


class DeltaUnavailable(RuntimeError):
    """The Spark session cannot read or write Delta tables (jars or settings missing)."""


def require_delta(spark) -> None:
    from auditor.spark.session import delta_missing_message, has_delta

    if not has_delta(spark):
        raise DeltaUnavailable(delta_missing_message())


def warehouse_uri(warehouse: str) -> str:
    """A local path made absolute; a URI (``s3a://``, ``hdfs://``, ``file:``) kept as given."""
    if _SCHEME.match(warehouse) and not re.match(r"^[A-Za-z]:[\\/]", warehouse):
        return warehouse.rstrip("/")
    return os.path.abspath(warehouse)


def input_path(raw: str) -> str:
    """An input as the job spells it: a local path made absolute (a ``file:`` URI too),
    or an ``hdfs://`` / ``s3a://`` URI (read through :mod:`auditor.ingest.storage` on the
    driver and the executors). ValueError for another scheme."""
    from auditor.ingest.storage import normalize

    return normalize(raw)


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def table_uri(wh: str, name: str) -> str:
    return join(wh, "tables", name)


def is_delta(spark, uri: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, uri))


def read(spark, uri: str):
    return spark.read.format("delta").load(uri)


def sql_str(s: str) -> str:
    """A Spark SQL string literal (backslash escapes are on by default)."""
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def in_predicate(column: str, values) -> str:
    vals = sorted(set(values))
    return f"`{column}` IN ({', '.join(sql_str(v) for v in vals)})"


def overwrite(df, uri: str, *, replace_where: str | None = None, new_schema: bool = False) -> None:
    """One Delta commit: the whole table (``replace_where`` None) or the rows matching it.
    ``new_schema``: a whole-table overwrite may also replace the schema (a rebuild
    after an upgrade that changed a table)."""
    w = df.write.format("delta").mode("overwrite")
    if replace_where is not None:
        w = w.option("replaceWhere", replace_where)
    elif new_schema:
        w = w.option("overwriteSchema", "true")
    w.save(uri)


def create_empty(spark, uri: str, schema) -> None:
    """An empty Delta table with ``schema`` (one metadata commit, no Spark job)."""
    from delta.tables import DeltaTable

    DeltaTable.createIfNotExists(spark).location(uri).addColumns(schema).execute()
