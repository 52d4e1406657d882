"""Joins on the replica and broker keys match a null broker id (``auditor.model.replica_key``).

A log dir handed over without its ``meta.properties`` has no broker id; a join on the
replica key by column names would drop its rows (a stuck LSO went unreported so). Here:
the helper gives what a join by names gives, plus the rows with null keys; and no module
of the product joins on those keys any other way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from auditor.model.replica_key import BROKER, REPLICA, join_null_safe, join_replica

ROOT = Path(__file__).resolve().parent.parent
KEY_COLUMNS = set(REPLICA) - {"cluster_id", "log_dir", "topic", "partition"}  # the nullable one: broker_id


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _keyed_by_names(node, tainted: set[str]) -> bool:
    """Whether a join's ``on`` is a list of column names holding the replica or broker key."""
    if isinstance(node, ast.Name):
        return node.id in tainted
    if isinstance(node, (ast.List, ast.Tuple)):
        return any((isinstance(e, ast.Starred) and _keyed_by_names(e.value, tainted)) or _keyed_by_names(e, tainted)
                   or (isinstance(e, ast.Constant) and e.value in KEY_COLUMNS) for e in node.elts)
    if isinstance(node, ast.BinOp):
        return _keyed_by_names(node.left, tainted) or _keyed_by_names(node.right, tainted)
    return False


def by_name_key_joins(source: str) -> list[int]:
    """Lines of ``.join(other, on, ...)`` calls whose ``on`` names the replica or broker key's
    columns (directly, or through a variable built from ``REPLICA``/``BROKER`` or naming
    ``broker_id``)."""
    tree = ast.parse(source)
    tainted = {"REPLICA", "BROKER"}
    changed = True
    while changed:  # names bound to key lists, transitively (ENTRY = [*REPLICA, ...])
        changed = False
        for n in ast.walk(tree):
            if isinstance(n, ast.Assign) and _keyed_by_names(n.value, tainted):
                for t in n.targets:
                    if isinstance(t, ast.Name) and t.id not in tainted:
                        tainted.add(t.id)
                        changed = True
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "join":
            on = n.args[1] if len(n.args) > 1 else next((k.value for k in n.keywords if k.arg == "on"), None)
            if on is not None and _keyed_by_names(on, tainted):
                out.append(n.lineno)
    return out


def test_the_scanner_finds_joins_by_key_names():
    src = ("ENTRY = [*REPLICA, 'producer_id']\nKEY = ENTRY + ['x']\n"
           "a.join(b, REPLICA)\na.join(b, [*REPLICA, 'p'], 'left')\na.join(b, ENTRY)\na.join(b, on=KEY)\n"
           "a.join(b, ['cluster_id', 'broker_id'])\n"
           "a.join(b, ['cluster_id', 'topic'])\n', '.join(parts)\na.join(b, [a[c].eqNullSafe(b[c]) for c in REPLICA])\n")
    assert by_name_key_joins(src) == [3, 4, 5, 6, 7]


def test_no_join_on_the_replica_or_broker_key_by_column_names():
    bad = []
    for folder in ("auditor", "rules"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            bad += [f"{path.relative_to(ROOT)}:{line}" for line in by_name_key_joins(path.read_text())]
    assert not bad, ("joins on the replica/broker key by column names drop rows with no broker id; "
                     f"use auditor.model.replica_key.join_replica / join_broker: {bad}")


# -- the helper against Spark's join by names ------------------------------------------------------------

LEFT = [("c", 1, "/d1", "t", 0, 10, "a"), ("c", 2, "/d2", "t", 0, 11, "b"), ("c", None, "/d3", "t", 0, 12, "n"),
        ("c", 1, "/d1", "t", 1, 13, "only-left")]
RIGHT = [("c", 1, "/d1", "t", 0, 10, "A"), ("c", None, "/d3", "t", 0, 12, "N"), ("c", 3, "/d4", "t", 0, 14, "only-right"),
         ("c", 2, "/d2", "t", 0, 99, "other-offset")]
SCHEMA_L = "cluster_id string, broker_id int, log_dir string, topic string, partition int, offset long, l string"
SCHEMA_R = "cluster_id string, broker_id int, log_dir string, topic string, partition int, offset long, r string"


@pytest.fixture(scope="module")
def frames(spark):
    return spark.createDataFrame(LEFT, SCHEMA_L), spark.createDataFrame(RIGHT, SCHEMA_R)


def _rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


@pytest.mark.spark
@pytest.mark.parametrize("how", ["inner", "left", "full_outer", "left_anti", "left_semi"])
def test_same_as_a_join_by_names_and_null_broker_ids_match(frames, how):
    left, right = frames
    got = join_replica(left, right, how, on=["offset"])
    by_names = left.join(right, [*REPLICA, "offset"], how)
    assert got.columns == by_names.columns
    assert got.dtypes == by_names.dtypes
    # without the null broker id's rows, the two agree row for row
    no_null = lambda df: df.where("broker_id IS NOT NULL")  # noqa: E731
    assert _rows(no_null(join_replica(no_null(left), no_null(right), how, on=["offset"]))) == _rows(no_null(by_names))
    null_rows = [r for r in _rows(got) if r[1] is None]
    if how == "left_anti":
        assert null_rows == []  # it matched its right row, so it is not kept
    else:
        assert null_rows, f"{how}: the null broker id's row was dropped"
        assert all(r[:6] == ("c", None, "/d3", "t", 0, 12) for r in null_rows)
        if how in ("inner", "left", "full_outer"):
            assert null_rows[0][-2:] == ("n", "N")


@pytest.mark.spark
def test_broker_key_and_on_columns_keep_plain_equality(spark):
    brokers = spark.createDataFrame([("c", None), ("c", 1)], "cluster_id string, broker_id int")
    conf = spark.createDataFrame([("c", None, 7), ("c", 1, 8)], "cluster_id string, broker_id int, ms long")
    assert _rows(join_null_safe(brokers, conf, BROKER, "left")) == [("c", 1, 8), ("c", None, 7)]
    # a column of ``on`` is matched with ``=``: a null there matches nothing, as in any join
    a = spark.createDataFrame([("c", 1, None)], "cluster_id string, broker_id int, x long")
    b = spark.createDataFrame([("c", 1, None)], "cluster_id string, broker_id int, x long")
    assert join_null_safe(a, b, BROKER, "inner", on=["x"]).count() == 0
    with pytest.raises(ValueError, match="missing"):
        join_null_safe(a, b.drop("x"), BROKER, "inner", on=["x"])
