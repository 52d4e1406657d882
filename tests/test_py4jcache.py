"""The driver's cached JVM look-ups (auditor/perf/py4jcache.py): each positive answer
asked once, everything else as Py4J answers it."""

from __future__ import annotations

import pytest
from py4j.java_gateway import JavaMember
from py4j.protocol import Py4JError

from auditor.perf import py4jcache


class _Count:
    """Round trips of the calling thread's Py4J connection while active."""

    def __init__(self, sc) -> None:
        self.client = sc._gateway._gateway_client
        self.n = 0

    def __enter__(self):
        real = self.client.send_command

        def counted(command, *a, **k):
            self.n += 1
            return real(command, *a, **k)

        self.client.send_command = counted
        return self

    def __exit__(self, *exc) -> None:
        del self.client.send_command  # the class's method again


def test_the_session_view_keeps_classes_and_methods(spark):
    sc = spark.sparkContext
    assert type(sc._jvm) is py4jcache._View  # installed by get_spark
    functions = sc._jvm.functions
    assert sc._jvm.functions is functions
    col = functions.col
    assert isinstance(col, JavaMember) and functions.col is col
    assert sc._jvm.functions.col("x").toString() == "x"  # the cached member still calls the JVM
    with _Count(sc) as c:
        sc._jvm.functions.col("y")
    assert c.n == 1  # the call alone: F.col was three round trips (class, method, call)


def test_packages_are_kept_and_classes_still_construct(spark):
    jvm = spark.sparkContext._jvm
    util = jvm.java.util
    assert jvm.java.util is util
    lst = util.ArrayList()
    lst.add(3)
    assert lst.size() == 1 and jvm.java.util.ArrayList is util.ArrayList


def test_missing_names_raise_every_time_and_fields_are_read_again(spark):
    jvm = spark.sparkContext._jvm
    for _ in range(2):  # (an unknown top-level name is a package to Py4J, cached or not)
        with pytest.raises(Py4JError):
            jvm.functions.noSuchFunction42
    assert "noSuchFunction42" not in vars(jvm.functions)
    integer = jvm.java.lang.Integer
    assert integer.MAX_VALUE == 2**31 - 1
    assert "MAX_VALUE" not in vars(integer)  # a field's value is never kept


def test_install_is_idempotent(spark):
    sc = spark.sparkContext
    py4jcache.install(sc)
    py4jcache.install(sc)
    assert type(sc._jvm) is py4jcache._View
