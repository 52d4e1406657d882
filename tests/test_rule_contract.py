"""The contract every rule of the catalog keeps (``auditor.engine.rule``).

* Evidence: every declared field is given by some ``evidence(...)`` call of the
  rule's module, and every given one is declared (read from the source, so a field
  declared but never set — always null — fails); at run time
  ``auditor.engine.findings.conform`` also refuses a struct that differs from the
  declaration, and every scenario audit goes through it.
* Templates name only the finding's columns and the rule's evidence.
* Kinds whose finding needs no action have no commands: an in-flight transaction
  is never handed an abort.
* Every evidence key names what it holds (not, say, a ``coordinator_epoch`` that holds a
  producer epoch).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap

import pytest

from auditor.engine.findings import DETECTION_COLUMNS
from auditor.engine.rule import discover
from auditor.engine.messages import fill, template_fields

ALL_RULES = discover()
COLUMNS = {n for n, _ in DETECTION_COLUMNS}


def _given(module) -> set[str]:
    """The evidence fields a rule's module fills: the keywords of its ``evidence(...)`` calls (the
    Spark query), and in its ``decide`` step (what depends on the reference instant) the string
    keys of dict literals, the keywords of ``.update(...)`` and the keys assigned by subscript."""
    tree = ast.parse(inspect.getsource(module))
    keys: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "evidence":
            keys |= {kw.arg for kw in node.keywords if kw.arg}
    decide = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "decide"), None)
    for node in ast.walk(decide) if decide is not None else ():
        if isinstance(node, ast.Dict):
            keys |= {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "update":
            keys |= {kw.arg for kw in node.keywords if kw.arg}
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
    return keys - {"kind", "duration_ms", "evidence"}  # a finding's own columns, set beside its evidence


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_declared_evidence_is_the_given_evidence(rule):
    given = _given(importlib.import_module(rule.run.__module__))
    declared = set(rule.evidence_types)
    assert given == declared, (f"{rule.id}: given but not declared {sorted(given - declared)}, "
                               f"declared but never given {sorted(declared - given)}")
    assert not declared & COLUMNS, f"{rule.id}: evidence repeats finding columns {sorted(declared & COLUMNS)}"
    assert all(e.doc for e in rule.evidence), f"{rule.id}: an evidence field without a meaning"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_templates_name_only_columns_and_evidence(rule):
    unknown = template_fields(rule) - COLUMNS - set(rule.evidence_types)
    assert not unknown, f"{rule.id}: templates name {sorted(unknown)}"
    # every template renders over an all-null finding (no KeyError, no format error)
    empty = {n: None for n in COLUMNS | set(rule.evidence_types)}
    for name, kind in rule.kinds.items():
        assert fill(kind.message, empty), (rule.id, name)
        for c in kind.commands:
            assert fill(c.template, empty, command=True) is None  # nothing known: no command


def test_no_action_kinds_have_no_commands():
    rules = {r.id: r for r in ALL_RULES}
    assert rules["hanging-transaction"].kinds["in-flight"].commands == ()
    assert rules["stuck-lso"].kinds["open"].commands == ()
    # KIP-939: an abort breaks the external transaction; the advice says when one is safe
    for rule, kind in (("hanging-transaction", "two-phase-commit"), ("stuck-lso", "two-phase-commit")):
        assert rules[rule].kinds[kind].commands == () and rules[rule].kinds[kind].severity == "info"
    with_commands = {(r.id, k) for r in ALL_RULES for k, kind in r.kinds.items() if kind.commands}
    assert ("hanging-transaction", "hanging") in with_commands and ("stuck-lso", "stuck") in with_commands


def test_evidence_keys_name_what_they_hold():
    """The coordinator's view of an epoch is a producer epoch, not a coordinator epoch."""
    ev = {r.id: set(r.evidence_types) for r in ALL_RULES}["epoch-exhaustion"]
    assert "coordinator_producer_epoch" in ev and "coordinator_epoch" not in ev


# -- the views a rule reads -------------------------------------------------------------------

from auditor.engine.views import VIEWS, closure  # noqa: E402


def _views_read(module) -> set[str]:
    """``ctx.<view>`` attributes the module reads."""
    tree = ast.parse(inspect.getsource(module))
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and getattr(n.value, "id", None) == "ctx"}
    return {n for n in names if n in VIEWS}


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_declared_views_are_the_views_read(rule):
    read = _views_read(importlib.import_module(rule.run.__module__))
    assert set(rule.views) == read, (f"{rule.id}: reads but does not declare {sorted(read - set(rule.views))}, "
                                     f"declares but never reads {sorted(set(rule.views) - read)}")


def test_views_are_released_after_their_last_reader():
    from auditor.engine.runner import release_plan
    from auditor.report.spark.data import VIEWS_READ

    order = [r.id for r in ALL_RULES]
    plan = release_plan(ALL_RULES)
    after = {v: order[i] for i, vs in plan.items() for v in vs}
    # every view some rule reads (or one it is built on) is released exactly once, after its last reader
    assert set(after) == closure(v for r in ALL_RULES for v in r.views)
    for v, rid in after.items():
        readers = [r.id for r in ALL_RULES if v in closure(r.views)]
        assert rid == readers[-1], (v, rid, readers)
    assert after["coordinator_history"] == "transaction-state-violation"
    assert after["producer_batches"] == "unknown-producer-gap"  # sequence_breaks is built on it
    # with the report data to come, what it reads stays until close()
    with_report = {v for vs in release_plan(ALL_RULES, VIEWS_READ).values() for v in vs}
    assert not with_report & closure(VIEWS_READ) and "sequence_breaks" in with_report


_TABLE_READS = ("table", "has_rows", "small_rows")


def _tables_read(source: str) -> set[str]:
    """The tables a source reads by name: ``ctx.table("x")``, ``ctx.has_rows("x")``,
    ``ctx.small_rows("x", ...)`` (or a local ``table("x")`` helper); ``remote_metadata`` is the
    ``remote_log_segments`` table's rows."""
    tree = ast.parse(textwrap.dedent(source))
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name in _TABLE_READS:
                out.add(n.args[0].value)
        if isinstance(n, ast.Attribute) and n.attr == "remote_metadata":
            out.add("remote_log_segments")
    return out


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_declared_tables_are_the_tables_read(rule):
    """``Rule.tables`` are the tables the rule's module reads itself; ``needs`` (the tables without
    whose rows it is skipped) are among all it reads, its views' included (``Rule.reads``)."""
    read = _tables_read(inspect.getsource(importlib.import_module(rule.run.__module__)))
    assert set(rule.tables) == read, rule.id
    assert set(rule.needs) <= rule.reads, (rule.id, sorted(set(rule.needs) - rule.reads))


def test_every_view_and_fact_declares_the_tables_it_reads():
    from auditor.engine.views import FACTS

    for spec in [*VIEWS.values(), *FACTS.values()]:
        assert set(spec.tables) == _tables_read(inspect.getsource(spec.build)), spec.name


def test_views_are_attributes_a_checker_can_follow():
    """Every view and fact is an attribute of the ``Views`` class both contexts inherit (no
    ``__getattr__`` lookup): a reader and a type checker follow ``ctx.transactions`` to its builder."""
    from auditor.engine.context import AuditContext, RuleContext
    from auditor.engine.views import FACTS, Views

    for name, spec in [*VIEWS.items(), *FACTS.items()]:
        assert Views.__dict__[name] is spec
        for cls in (AuditContext, RuleContext):
            assert getattr(cls, name) is spec, (cls.__name__, name)
    assert "__getattr__" not in AuditContext.__dict__


def test_an_undeclared_view_fails_at_once():
    from auditor.engine.context import AuditContext, RuleContext

    ctx = RuleContext(AuditContext(None, "/nonexistent"), "rule x", ("partitions",))
    with pytest.raises(AttributeError, match="rule x reads view 'transactions' without declaring it"):
        ctx.transactions
    assert ctx.options.transaction_max_timeout_ms == 900_000  # tables and options pass through
