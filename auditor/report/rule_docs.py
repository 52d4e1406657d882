"""A rule's documentation, rendered from the rule itself (one source).

The module docstring of a rule says what the anomaly is, why it matters and how
it arises (prose); the rest comes from the rule's declaration: the evidence it
reports, the severity of each kind, the message each kind gets, what fixes it,
and the Kafka proposals behind it. ``txn-audit explain`` prints this page and
``scripts/build_docs.py`` writes every rule's page into ``docs/rules.md``.
"""

from __future__ import annotations

from auditor.engine.rule import Rule


def rule_markdown(rule: Rule, level: int = 1) -> str:
    h = "#" * level
    lines = [f"{h} {rule.id}", "", f"*{rule.title}*", "", rule.doc.strip(), ""]
    lines += [f"{h}# Evidence", "", "| field | type | meaning |", "|---|---|---|"]
    lines += [f"| `{e.name}` | {e.type} | {e.doc} |" for e in rule.evidence]
    lines += ["", f"{h}# Severity", "", "| kind | severity | message |", "|---|---|---|"]
    lines += [f"| `{name}` | {k.severity} | {_md_cell(k.message)} |" for name, k in rule.kinds.items()]
    lines += ["", f"{h}# Remediation", ""]
    for name, k in rule.kinds.items():
        lines.append(f"* `{name}`: {k.advice or 'no action needed.'}" if not k.commands else
                     f"* `{name}`: {k.advice}".rstrip(": ") + ("" if k.advice else ""))
        for c in k.commands:
            label = f" ({c.applies_to})" if c.applies_to else ""
            lines.append(f"  * `{c.template}`{label}")
    lines += ["", f"{h}# References", ""]
    lines += [f"* {p}" for p in rule.proposals]
    return "\n".join(lines).rstrip() + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
