"""Names the driver looks up in the JVM, looked up once per session instead of once per use
(switch ``py4jcache``, :mod:`auditor.perf`).

Why: building the rules' queries is thousands of Py4J calls, and about 40% of
them are not calls at all but look-ups. Every ``F.col("x")`` -- and every
column PySpark makes of a string name -- is three round trips to the JVM:
``jvm.functions`` (is "functions" a class or a package?), ``.col`` (is it a
method?), then the call. Py4J asks again each time, on purpose: its views
allow imports to change. PySpark's imports are made when the session starts
and never change, and a class's methods do not change while the JVM runs. On
one capture's audit, caching the answers takes the main thread from ~14,300
round trips to ~8,300 and the audit about 0.3-0.9 s sooner (measured
alternately, 3 pairs; bench/JOURNAL.md, `scan.py`, third round).

How: the session's JVM view (``SparkContext._jvm``) becomes an instance of a
subclass whose ``__getattr__`` keeps each class or package it finds in the
instance's ``__dict__`` (the next look-up never reaches ``__getattr__``), and
each class or package it hands out does the same for its static methods,
nested classes and sub-packages. Only positive answers are kept (a name that is
missing raises every time, as before); a static field's value is never kept
(fields may change). A new gateway (a new JVM) has a new view: nothing carries
over.
"""

from __future__ import annotations


from py4j.java_gateway import JavaClass, JavaMember, JavaPackage, JVMView

from auditor.perf import enabled


def _keep(owner: object, name: str, found: object) -> object:
    if isinstance(found, JavaClass):
        found.__class__ = _Class
    elif isinstance(found, JavaPackage):
        found.__class__ = _Package
    elif not isinstance(found, JavaMember):
        return found  # a field's value: asked again next time
    owner.__dict__[name] = found
    return found


class _View(JVMView):
    def __getattr__(self, name: str):
        return _keep(self, name, JVMView.__getattr__(self, name))


class _Class(JavaClass):
    def __getattr__(self, name: str):
        return _keep(self, name, JavaClass.__getattr__(self, name))


class _Package(JavaPackage):
    def __getattr__(self, name: str):
        return _keep(self, name, JavaPackage.__getattr__(self, name))


def install(sc) -> None:
    """Cache the look-ups of ``sc``'s JVM view (a SparkContext's ``_jvm``); idempotent."""
    view = getattr(sc, "_jvm", None)
    if type(view) is JVMView and enabled("py4jcache"):
        view.__class__ = _View
