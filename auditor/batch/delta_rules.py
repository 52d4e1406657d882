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

from auditor.engine.context import AuditContext, AuditOptions
from auditor.engine.runner import AuditResult, audit
from auditor.tables.source import DeltaTables


class DeltaAuditContext(AuditContext):
    """The audit context over a warehouse's Delta tables (``tables_uri``), each read at one
    version for the whole audit (:class:`auditor.tables.source.DeltaTables`)."""

    source_type = DeltaTables

    def __init__(self, spark, tables_uri: str, options: AuditOptions | None = None) -> None:
        super().__init__(spark, tables_uri, options)
        self.tables_uri = tables_uri


def run_rules(spark, tables_uri: str, options: AuditOptions | None = None, only: list[str] | tuple[str, ...] = (),
              progress: Callable[[str, int, int], None] | None = None) -> AuditResult:
    """The rule catalog (or the rules in ``only``) over the warehouse's Delta
    tables: the ``audit`` command's loop with a :class:`DeltaAuditContext`."""
    return audit(spark, tables_uri, options=options, only=only, progress=progress, context=DeltaAuditContext)
