"""Every rule documents exactly the evidence keys it emits (``RULE.evidence``).

The keys are read from the rule's source: every keyword of every ``evidence(...)``
call in the module (``auditor.engine.findings.evidence`` builds the map). A key
emitted but not listed, or listed but never emitted, fails — so a renamed or
mislabelled key (an ``evidence['coordinator_epoch']`` that holds a producer
epoch) cannot go unnoticed.
"""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from auditor.engine.rule import discover

ALL_RULES = discover()


def _emitted(module) -> set[str]:
    tree = ast.parse(inspect.getsource(module))
    keys: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "evidence":
            keys |= {kw.arg for kw in node.keywords if kw.arg}
    return keys


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_documented_evidence_keys_are_the_emitted_ones(rule):
    module = importlib.import_module(rule.run.__module__)
    emitted = _emitted(module)
    assert emitted, f"{rule.id}: no evidence(...) call found"
    assert set(rule.evidence) == emitted, (
        f"{rule.id}: emitted but not documented {sorted(emitted - set(rule.evidence))}, "
        f"documented but never emitted {sorted(set(rule.evidence) - emitted)}")


def test_evidence_keys_name_what_they_hold():
    """The coordinator's view of an epoch is a producer epoch, not a coordinator epoch."""
    module = importlib.import_module("rules.epoch_exhaustion")
    assert "coordinator_producer_epoch" in _emitted(module) and "coordinator_epoch" not in _emitted(module)
