"""docs/tables.md documents every table and every column ingestion writes."""

from __future__ import annotations

import re

from conftest import PROJECT
from auditor.ingest.context import CONTEXT_COLUMNS
from auditor.ingest.inventory import FILES_SCHEMA
from auditor.ingest.segments import RECORD_CONTEXT_COLUMNS
from auditor.ingest.tables import TABLES

DOC = (PROJECT / "docs" / "tables.md").read_text()


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


def test_docs_are_assembled_from_parts():
    parts = sorted((PROJECT / "docs" / "_parts").glob("*.md"))
    expected = "\n\n".join(p.read_text().strip() for p in parts) + "\n"
    assert DOC == expected, "docs/tables.md is stale: run python scripts/build_docs.py"
