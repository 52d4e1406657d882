"""The contract every rule of the catalog keeps (``auditor.engine.rule``).

* Evidence: every declared field is given by some ``evidence(...)`` call of the
  rule's module, and every given one is declared (read from the source, so a field
  declared but never set — always null — fails); at run time
  ``auditor.engine.findings.conform`` also refuses a struct that differs from the
  declaration, and every scenario audit goes through it.
* Templates name only the finding's columns and the rule's evidence.
* Kinds whose finding needs no action have no commands: an in-flight transaction
  is never handed an abort.
* Every evidence key names what it holds (issue: a ``coordinator_epoch`` that held a
  producer epoch).
"""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from auditor.engine.findings import DETECTION_COLUMNS
from auditor.engine.rule import discover
from auditor.report.messages import fill, template_fields

ALL_RULES = discover()
COLUMNS = {n for n, _ in DETECTION_COLUMNS}


def _given(module) -> set[str]:
    tree = ast.parse(inspect.getsource(module))
    keys: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "evidence":
            keys |= {kw.arg for kw in node.keywords if kw.arg}
    return keys


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
    with_commands = {(r.id, k) for r in ALL_RULES for k, kind in r.kinds.items() if kind.commands}
    assert ("hanging-transaction", "hanging") in with_commands and ("stuck-lso", "stuck") in with_commands


def test_evidence_keys_name_what_they_hold():
    """The coordinator's view of an epoch is a producer epoch, not a coordinator epoch."""
    ev = {r.id: set(r.evidence_types) for r in ALL_RULES}["epoch-exhaustion"]
    assert "coordinator_producer_epoch" in ev and "coordinator_epoch" not in ev
