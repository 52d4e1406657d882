"""What a rule is, and how the engine finds them.

Rules live in the top-level ``rules`` package, one module per rule, each
exposing ``RULE``. Like ruff's and sqlfluff's catalogs, every rule has a stable
id (never reused), a one-line title and documentation: its module docstring says
what the anomaly is, why it matters and how it arises; its declaration says the
rest once — the evidence it reports, the severity, message and remediation of
each kind, the Kafka proposals behind it — and
:func:`auditor.report.rule_docs.rule_markdown` renders both into its page.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from auditor.engine.context import AuditContext
    from auditor.model.verdict_table import Verdicts

SEVERITIES = ("info", "warning", "error", "critical")


def severity_rank(s: str) -> int:
    return SEVERITIES.index(s)


EVIDENCE_TYPES = ("string", "int", "bigint", "boolean", "array<string>", "array<int>", "array<bigint>")


@dataclass(frozen=True)
class Evidence:
    """One field of a rule's evidence: what the finding proves its case with.

    ``type`` is the Spark SQL type the rule's ``evidence`` struct carries it as;
    reports give it back with that type (numbers as numbers), although the
    findings table stores every rule's evidence in one ``map<string,string>``."""

    name: str
    type: str
    doc: str

    def __post_init__(self) -> None:
        if self.type not in EVIDENCE_TYPES:
            raise ValueError(f"evidence {self.name}: unsupported type {self.type}")


@dataclass(frozen=True)
class Command:
    """A paste-ready command, as a template over the finding's fields and evidence
    (``{topic}``, ``{first_offset}``, ``{coordinator_epoch:default=0}``).
    ``applies_to`` says when to use it instead of the first one (``brokers before 3.0``)."""

    template: str
    applies_to: str | None = None


@dataclass(frozen=True)
class Kind:
    """One outcome of a rule: its severity, the message template a report renders
    for it, the commands that fix it and the advice around them.

    Templates are ``str.format`` fields over the finding's columns and evidence, with
    the specs of :mod:`auditor.engine.messages` (``{duration_ms:duration}``,
    ``{consumer_groups:list}``); text in ``[[...]]`` is left out when a field in it is empty.
    A kind whose finding needs no action (an in-flight transaction) has no commands."""

    severity: str
    message: str
    commands: tuple[Command, ...] = ()
    advice: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity}")


@dataclass(frozen=True)
class Rule:
    """A rule of the catalog.

    ``run(ctx)`` returns *detections*: a DataFrame with the finding's location
    columns (any of :data:`auditor.engine.findings.DETECTION_COLUMNS`), ``kind``
    (a key of ``kinds``) and ``evidence``, a struct with exactly the fields of
    ``evidence``. Severity, message and remediation come from the kind, rendered
    on the driver from its templates (:mod:`auditor.engine.messages`), never assembled in Spark.
    """

    id: str
    title: str
    run: Callable[["AuditContext"], "object"]  # -> DataFrame of detections
    kinds: Mapping[str, Kind]
    evidence: tuple[Evidence, ...] = ()
    proposals: tuple[str, ...] = ()
    doc: str = field(default="", compare=False)
    views: tuple[str, ...] = ()  # the shared views it reads (auditor.engine.views.VIEWS): built once, released after the last reader
    needs: tuple[str, ...] = ()  # tables that must have rows; it is skipped (and says so) without them
    tables: tuple[str, ...] = ()  # the tables it reads itself (ctx.table / has_rows); its views' are theirs
    # what depends on the run's reference instant and transaction.max.timeout.ms (a transaction's
    # verdict and age, whether a record is old enough to report): decide(finding, verdicts) -> the
    # finding completed, or None (not a finding at this instant); applied on the driver to the
    # collected detections, so another --as-of decides again without the tables
    # (auditor.model.verdict_table.Verdicts; auditor.engine.runner.finish)
    decide: Callable[[dict, "Verdicts"], "dict | None"] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.kinds:
            raise ValueError(f"rule {self.id}: no kinds")
        names = [e.name for e in self.evidence]
        if len(set(names)) != len(names):
            raise ValueError(f"rule {self.id}: evidence fields named twice")

    @property
    def severity(self) -> str:
        """The most severe of its kinds (what the catalog lists)."""
        return max((k.severity for k in self.kinds.values()), key=severity_rank)

    @property
    def evidence_types(self) -> dict[str, str]:
        return {e.name: e.type for e in self.evidence}

    @property
    def reads(self) -> frozenset[str]:
        """Every table it reads: its own and those of the views it reads and they are built on
        (``needs`` is a subset: the ones without whose rows it has nothing to say)."""
        from auditor.engine.views import VIEWS, closure

        return frozenset(self.tables).union(*(VIEWS[v].tables for v in closure(self.views)))


def discover(package: str = "auditor.rules") -> list[Rule]:
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


_CATALOG: dict[str, Rule] | None = None


def catalog() -> dict[str, Rule]:
    """The discovered rules by id (discovered once per process)."""
    global _CATALOG
    if _CATALOG is None:
        _CATALOG = {r.id: r for r in discover()}
    return _CATALOG
