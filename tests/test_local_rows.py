"""``auditor.spark.local_rows.local_df``: driver-side rows as a DataFrame without a Python worker."""

from __future__ import annotations


def _lineage(df) -> str:
    return df._jdf.queryExecution().toRdd().toDebugString()


def test_local_df_equals_create_dataframe_and_starts_no_python_rdd(spark):
    """Same schema and rows as ``createDataFrame`` of the same list (nulls, nested arrays and
    structs, a non-ASCII string, int and bigint limits, dict rows, no rows at all), and its
    lineage holds no ``PythonRDD``: the rows are decoded in the JVM (``createDataFrame``'s
    holds one, whose job forks PySpark's workers)."""
    from auditor.spark.local_rows import local_df

    schema = ("file string, broker_id int, end_offset bigint, ok boolean, "
              "tags array<string>, leader struct<epoch: int, start: bigint>")
    rows = [
        ("/k/é/00.log", 1, 2**63 - 1, True, ["a", None], (3, 10)),
        (None, None, None, None, None, None),
        ("/k/x/01.log", -2**31, -1, False, [], (None, -5)),
    ]
    want = spark.createDataFrame(rows, schema)
    got = local_df(spark, rows, schema)
    assert got.schema == want.schema
    assert got.collect() == want.collect()
    assert "PythonRDD" in _lineage(want) and "PythonRDD" not in _lineage(got)

    names = want.schema.fieldNames()
    as_dicts = local_df(spark, [dict(zip(names, r)) for r in rows], want.schema)
    assert as_dicts.collect() == want.collect()

    empty = local_df(spark, [], schema)
    assert empty.schema == want.schema and empty.count() == 0


def test_the_audit_makes_no_dataframe_of_python_lists():
    """Every DataFrame of driver-side rows the audit, its views, its rules and its report make
    goes through ``local_df`` (``AuditContext.small_df``): a ``createDataFrame`` call there
    would bring PySpark's workers back into every scan (three processes, 2 CPU-s, on one
    sample capture)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    places = [*(root / "auditor" / d for d in ("engine", "model", "report")), root / "rules",
              root / "auditor" / "batch" / "delta_rules.py"]
    files = [f for p in places for f in ([p] if p.is_file() else sorted(p.rglob("*.py")))]
    assert len(files) > 20
    calls = [f"{f.relative_to(root)}:{n}" for f in files
             for n, line in enumerate(f.read_text().splitlines(), 1) if "createDataFrame(" in line]
    assert calls == []
