"""``auditor.spark.literals.in_strings``: the live log's file filters in one JVM call."""

from __future__ import annotations


def test_in_strings_is_isin_for_awkward_strings_and_nulls(spark):
    """The same rows as ``Column.isin`` (quotes, backslashes, non-ASCII, a path that only
    differs by its last byte, a null), and an ``INSET`` once optimised (a hash set, not a scan
    of the list per row)."""
    from pyspark.sql import functions as F

    from auditor.spark.literals import in_strings

    names = ["/k/it's/0.log", "/k/back\\slash/0.log", "/k/é ü/0.log", "/k/a/00.log", "/k/`tick`/0.log"]
    rows = [(n,) for n in names] + [("/k/a/01.log",), (None,)]
    df = spark.createDataFrame(rows, "file string")
    many = names + [f"/k/t-{i}/0.log" for i in range(40)]
    for want in (names[:1], names, many):
        ours = sorted(df.where(in_strings("file", want)).collect(), key=str)
        theirs = sorted(df.where(F.col("file").isin(want)).collect(), key=str)
        assert ours == theirs and len(ours) == min(len(want), len(names))
        assert sorted(df.where(~in_strings("file", want)).collect(), key=str) == \
            sorted(df.where(~F.col("file").isin(want)).collect(), key=str)
    assert "INSET" in df.where(in_strings("file", many))._jdf.queryExecution().optimizedPlan().toString()
    assert df.where(in_strings("file", [])).count() == 0
    # a column whose name needs quoting
    odd = spark.createDataFrame([("x",), ("y",)], "`we``ird` string")
    assert [r[0] for r in odd.where(in_strings("we`ird", ["y"])).collect()] == ["y"]
