"""A rule's documentation, rendered from the rule itself (one source).

The module docstring of a rule holds the prose, in :data:`SECTIONS` order: what
the anomaly is (naming each kind), why it matters and how it arises. The rest
comes from the rule's declaration: the evidence it reports, the severity and
message of each kind, what fixes it (templates shown readably: ``<field>``,
``[optional part]``: :func:`auditor.engine.messages.readable`), and the Kafka
proposals behind it. The
example is the first finding of the rule's example case
(``tests/rules/<rule-id>/<case>.yaml`` marked ``example: true``), which
``scripts/build_docs.py`` copies into ``rules/examples.json`` so that an
installed package has it too. ``txn-audit explain`` prints this page and
``scripts/build_docs.py`` writes every rule's page into ``docs/rules.md``.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

from auditor.engine.rule import Rule
from auditor.engine.messages import readable

SECTIONS = ("What", "Why it matters", "How it arises")
_HEADING = re.compile(r"^\*\*(.+?)\.\*\*[ \t]*", re.M)
_REFERENCE = re.compile(r"KAFKA-\d+")
JIRA = "https://issues.apache.org/jira/browse/"


def doc_sections(doc: str) -> list[tuple[str, str]]:
    """The ``**Heading.** text`` sections of a rule's docstring, in order: (heading, text)."""
    marks = list(_HEADING.finditer(doc))
    return [(m.group(1), doc[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(doc)].strip())
            for i, m in enumerate(marks)]


@lru_cache(maxsize=1)
def examples() -> dict[str, dict]:
    """Each rule's example (``rules/examples.json``): the case it comes from and its first finding."""
    from importlib.resources import files

    path = files("auditor.rules").joinpath("examples.json")
    return json.loads(path.read_text()) if path.is_file() else {}


def rule_markdown(rule: Rule, level: int = 1, example: dict | None = None, tables: bool = True) -> str:
    """The rule's page; ``example`` (as in ``rules/examples.json``) defaults to the rule's own.

    ``tables=False`` gives the evidence and the kinds as lists instead of tables, for a terminal
    (``txn-audit explain``): a table squeezed into 80 columns cuts a long word of a message (a
    ``<placeholder>`` joined to a topic name) with an ellipsis, while a list item wraps at spaces
    with the whole line's width."""
    h = "#" * level
    lines = [f"{h} {rule.id}", "", f"*{rule.title}*", ""]
    for heading, text in doc_sections(rule.doc):
        lines += [f"{h}# {heading}", "", text, ""]
    evidence = [(f"`{e.name}`", e.type, e.doc) for e in rule.evidence]
    kinds = [(f"`{name}`", k.severity, readable(k.message)) for name, k in rule.kinds.items()]
    lines += [f"{h}# Evidence", ""] + _md_rows(("field", "type", "meaning"), evidence, tables)
    lines += ["", f"{h}# Severity", ""] + _md_rows(("kind", "severity", "message"), kinds, tables)
    lines += ["", f"{h}# Example", ""]
    lines += _example(example if example is not None else examples().get(rule.id))
    lines += ["", f"{h}# Remediation", ""]
    for name, k in rule.kinds.items():
        advice = readable(k.advice) if k.advice else ('' if k.commands else 'no action needed.')
        lines.append(f"* `{name}`: {_md_text(advice)}".rstrip())
        for c in k.commands:
            label = f" ({c.applies_to})" if c.applies_to else ""
            lines.append(f"  * `{readable(c.template)}`{label}")
    lines += ["", f"{h}# References", ""]
    lines += [f"* {_reference(p)}" for p in rule.proposals]
    return "\n".join(lines).rstrip() + "\n"


def _md_rows(header: tuple[str, str, str], rows: list[tuple[str, str, str]], table: bool) -> list[str]:
    """(name, qualifier, prose) rows as a Markdown table, or as a list of ``name (qualifier): prose``."""
    if not table:
        return [f"* {name} ({qualifier}): {_md_text(text)}" for name, qualifier, text in rows]
    return ([f"| {' | '.join(header)} |", "|---|---|---|"]
            + [f"| {name} | {qualifier} | {_md_cell(text)} |" for name, qualifier, text in rows])


def _example(ex: dict | None) -> list[str]:
    if not ex:
        return ["(no example case)"]
    f = ex["finding"]
    lines = [f"From the case `{ex['case']}`: {ex['description']}", "",
             f"A `{f['kind']}` finding ({f['severity']}):", "", f"> {f['message']}", ""]
    if f.get("remediation_commands"):
        lines += ["```sh"]
        lines += [c["command"] + (f"  # {c['applies_to']}" if c.get("applies_to") else "") for c in f["remediation_commands"]]
        lines += ["```", ""]
    lines += ["Evidence:", "", "```json", json.dumps(f["evidence"], indent=2), "```"]
    return lines


def _reference(p: str) -> str:
    """A proposal: a JIRA issue as a link; a KIP by its id (its wiki address carries its title)."""
    return f"[{p}]({JIRA}{p})" if _REFERENCE.fullmatch(p) else p


def _md_text(text: str) -> str:
    """Prose for Markdown: a ``<field>`` placeholder escaped, so it is not read as an HTML tag."""
    return text.replace("<", "\\<")


def _md_cell(text: str) -> str:
    return _md_text(text).replace("|", "\\|").replace("\n", " ")
