"""What a rule is, and how the engine finds them.

Rules live in the top-level ``rules`` package, one module per rule, each
exposing ``RULE``. Like ruff's and sqlfluff's catalogs, every rule has a stable
id (never reused), a one-line title, a default severity and documentation that
says what the anomaly is, how it arises, which Kafka proposal or JIRA is
behind it, what evidence it reports and what to do about it.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # pragma: no cover
    from auditor.engine.views import AuditContext

SEVERITIES = ("info", "warning", "error", "critical")


def severity_rank(s: str) -> int:
    return SEVERITIES.index(s)


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    severity: str  # default severity; a finding may carry a different one
    run: Callable[["AuditContext"], "object"]  # -> DataFrame in the findings shape
    proposals: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    remediation: str = ""
    doc: str = field(default="", compare=False)
    needs: tuple[str, ...] = ()  # tables the rule reads; it is skipped (and says so) without them

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"rule {self.id}: unknown severity {self.severity}")


def discover(package: str = "rules") -> list[Rule]:
    """Every ``RULE`` in the modules of ``package``, sorted by id."""
    pkg = importlib.import_module(package)
    found: list[Rule] = []
    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name.startswith("_"):
            continue
        m = importlib.import_module(f"{package}.{mod.name}")
        rule = getattr(m, "RULE", None)
        if isinstance(rule, Rule):
            doc = inspect.getdoc(m) or ""
            found.append(Rule(**{**rule.__dict__, "doc": doc}))
    ids = [r.id for r in found]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise ValueError(f"duplicate rule ids: {sorted(dupes)}")
    return sorted(found, key=lambda r: r.id)
