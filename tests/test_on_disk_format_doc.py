"""The repo stands alone: the on-disk facts the code cites are in its own docs.

Code, tests and docs cite ``docs/on-disk-format.md §N`` (or ``§N.M``); every such citation must
name a section that exists, and nothing may cite a document outside the repo (the team's notes
this page replaced) or read the team's shared directory by a fixed path: the external corpus of
real files is reached through ``tests/conftest.py`` (``TXN_AUDIT_REAL_LOGS``) only.
"""

from __future__ import annotations

import re

from conftest import PROJECT

DOC = PROJECT / "docs" / "on-disk-format.md"
#: where citations live: the code, the tests, the scripts, the docs and the sample captures' README
ROOTS = ("auditor", "rules", "tests", "scripts", "bench", "docs")
FILES = ("README.md", "sample_logs/README.md")
SUFFIXES = {".py", ".md", ".c", ".sh", ".yaml", ".toml", ".java"}
CITATION = re.compile(r"on-disk-format\.md §(\d+(?:\.\d+)?)")


def _sources():
    for root in ROOTS:
        for p in sorted((PROJECT / root).rglob("*")):
            if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts:
                yield p
    for name in FILES:
        yield PROJECT / name


def _sections() -> set[str]:
    """Section numbers of the page: ``## 4. ...`` gives 4, ``### 5.3 ...`` gives 5.3."""
    heads = re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", DOC.read_text(), flags=re.M)
    return set(heads)


def test_the_page_has_numbered_sections():
    sections = _sections()
    assert {str(n) for n in range(1, 11)} <= sections, sorted(sections)
    assert {"1.1", "1.6", "5.1", "5.3"} <= sections, sorted(sections)


def test_every_citation_names_a_section_of_the_page():
    sections = _sections()
    cited: dict[str, list[str]] = {}
    for p in _sources():
        for m in CITATION.finditer(p.read_text(errors="replace")):
            cited.setdefault(m.group(1), []).append(str(p.relative_to(PROJECT)))
    assert len(cited) >= 5, cited  # the decoders and their tests cite it
    missing = {n: where for n, where in cited.items() if n not in sections}
    assert not missing, missing


def test_nothing_cites_or_reads_outside_the_repo():
    notes = "kafka-" + "facts"  # the team's notes this page replaced (spelt so this file does not match)
    fixed = "/work/" + "shared"
    bad = [str(p.relative_to(PROJECT)) for p in _sources()
           if notes in (text := p.read_text(errors="replace")) or fixed in text]
    assert not bad, bad
