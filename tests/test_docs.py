"""The generated documents are current, and document what they must.

* docs/tables.md documents every table and every column ingestion writes;
* every rule's docstring holds exactly the prose sections (What, Why it matters,
  How it arises) and names each of its kinds; its page (``txn-audit explain``)
  adds Evidence, Severity, Example, Remediation and References from the
  declarations and its example case; docs/rules.md and rules/examples.json are
  what ``scripts/build_docs.py`` generates.
"""

from __future__ import annotations

import importlib.util
import re

import pytest

from conftest import PROJECT
from auditor.engine.rule import discover
from auditor.ingest.context import CONTEXT_COLUMNS
from auditor.ingest.inventory import FILES_SCHEMA
from auditor.ingest.segments import RECORD_CONTEXT_COLUMNS
from auditor.ingest.tables import TABLES
from auditor.report.rule_docs import SECTIONS, doc_sections, rule_markdown

DOC = (PROJECT / "docs" / "tables.md").read_text()
RULES = discover()
PAGE = [*SECTIONS, "Evidence", "Severity", "Example", "Remediation", "References"]


@pytest.fixture(scope="module")
def build_docs():
    spec = importlib.util.spec_from_file_location("build_docs", PROJECT / "scripts" / "build_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _section(name: str) -> str:
    m = re.search(rf"^## `{re.escape(name)}`\s*$(.*?)(?=^## |\Z)", DOC, re.M | re.S)
    assert m, f"docs/tables.md has no section for table {name}"
    return m.group(1)


def test_every_table_and_column_is_documented():
    shared = {c.name for c in CONTEXT_COLUMNS} | {c.name for c in RECORD_CONTEXT_COLUMNS}
    missing = []
    for name, spec in TABLES.items():
        body = _section(name)
        for col in spec.schema.names:
            if col in shared or col.startswith("log_"):
                continue
            if f"`{col}`" not in body:
                missing.append(f"{name}.{col}")
    body = _section("files")
    missing += [f"files.{c}" for c in FILES_SCHEMA.names if f"`{c}`" not in body and c not in shared]
    assert not missing, f"undocumented columns: {missing}"


def test_docs_are_assembled_from_parts(build_docs):
    assert DOC == build_docs.tables_md(), "docs/tables.md is stale: run python scripts/build_docs.py"


def test_rule_pages_and_examples_are_generated(build_docs):
    examples = build_docs.rule_examples()
    assert (PROJECT / "rules" / "examples.json").read_text() == build_docs.examples_json(examples), \
        "rules/examples.json is stale: run python scripts/build_docs.py"
    assert (PROJECT / "docs" / "rules.md").read_text() == build_docs.rules_md(examples), \
        "docs/rules.md is stale: run python scripts/build_docs.py"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_rule_docstring_is_the_prose_sections(rule):
    sections = doc_sections(rule.doc)
    assert rule.doc.startswith("**What.**"), f"{rule.id}: the docstring starts with its **What.** section"
    assert [h for h, _ in sections] == list(SECTIONS), f"{rule.id}: sections {[h for h, _ in sections]}"
    assert all(text for _, text in sections)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_rule_docstring_names_its_kinds_and_no_others(rule):
    """What the declarations say is not repeated (evidence, severities, advice), and the prose
    cannot drift from them: it explains every kind, and every lower-case name it quotes is a kind
    of the rule, another rule or a kind of file."""
    named = set(re.findall(r"``([a-z0-9]+(?:-[a-z0-9]+)*)``", rule.doc))
    assert set(rule.kinds) <= named, f"{rule.id}: kinds its docstring does not explain {sorted(set(rule.kinds) - named)}"
    others = {r.id for r in RULES} | {k for spec in TABLES.values() for k in spec.kinds}
    assert named <= set(rule.kinds) | others, f"{rule.id}: its docstring names {sorted(named - set(rule.kinds) - others)}"
    assert "evidence[" not in rule.doc, f"{rule.id}: evidence is the declaration's (EVIDENCE), not the docstring's"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_rule_page_has_every_section(rule):
    page = rule_markdown(rule)
    assert re.findall(r"^## (.+)$", page, re.M) == PAGE
    assert "(no example case)" not in page
    assert rule.proposals and any(k.advice or k.commands for k in rule.kinds.values())
