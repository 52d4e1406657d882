"""A DataFrame of a few rows the driver holds, without a Python worker.

Why: ``SparkSession.createDataFrame`` of a Python list parallelizes pickled rows, and
re-serialising them for the JVM is a ``map`` over a Python RDD: the first job that reads
such a DataFrame starts PySpark's worker daemon and forks workers, each importing PySpark
(measured on a ``scan`` of one sample capture: three worker processes, 2.0 CPU-s of the
scan's 18.7, for a few dozen rows). An Arrow table goes to the JVM as Arrow batches through
a file instead, decoded there (``PythonSQLUtils``): no Python process beyond the driver.

The audit, its views, its rules and its report reach it through
:meth:`auditor.engine.context.AuditContext.small_df`; the decode's own tasks go to the JVM as
Arrow data too (``auditor.ingest.spark_job``).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence


def local_df(spark, rows: Iterable[Sequence[Any] | Mapping[str, Any]], schema):
    """``rows`` (tuples in ``schema``'s column order, or dicts by column name) as a
    DataFrame of ``schema`` (a DDL string such as ``"file string, n bigint"`` or a
    ``StructType``), sent to the JVM as Arrow data."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    struct = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    names = struct.fieldNames()
    dicts = [dict(r) if isinstance(r, Mapping) else dict(zip(names, r)) for r in rows]
    table = pa.Table.from_pylist(dicts, schema=to_arrow_schema(struct))
    return spark.createDataFrame(table, schema=struct)


def arrow_df(spark, table):
    """``table`` (a ``pyarrow.Table``) as a DataFrame of the matching Spark schema, sent to the
    JVM as Arrow data; an empty table too (Spark infers no schema from zero rows)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    if table.num_rows == 0:
        return spark.createDataFrame([], from_arrow_schema(table.schema))
    return spark.createDataFrame(table)
