"""``txn-audit rules`` and ``txn-audit explain``: the rule catalog and one rule's page.

Both are read at a terminal, often an 80-column one, so neither may cut what a
reader types back: a rule id or a kind goes into ``--rule``, ``explain`` and the
metrics' labels, and one cut with an ellipsis cannot be copied. The names keep
their whole width and only prose (titles, messages) wraps, at spaces. Neither
command needs Spark or the audit's modules, so they live apart from ``scan``.
"""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from auditor.engine.rule import Rule, discover
from auditor.report.console import safe, wide

KIND_INDENT = "  "  # a kind's row under its rule's: indented, so the rows read as rule, its kinds, next rule


def catalog_table(rules: list[Rule]) -> Table:
    """The catalog: a row per rule (id, severity, title and the Kafka proposals behind it), then a
    row per kind of it (name, severity). The name and severity columns are as wide as their longest
    entry and never wrap, so the description column alone absorbs a narrow terminal."""
    names = [r.id for r in rules] + [KIND_INDENT + k for r in rules for k in r.kinds]
    t = Table(title="txn-audit rules")
    t.add_column("rule / kind", no_wrap=True, min_width=max(map(len, names), default=0))
    t.add_column("severity", no_wrap=True, min_width=len("critical"))
    t.add_column("description", min_width=len("description"))
    for r in rules:
        about = Text(safe(r.title, markup=False))
        if r.proposals:
            about.append(" (" + ", ".join(r.proposals) + ")", style="dim")
        t.add_row(Text(r.id, style="bold"), r.severity, about)
        for name, kind in r.kinds.items():
            t.add_row(KIND_INDENT + name, kind.severity, "")
    return t


@click.command("rules")
def rules_cmd() -> None:
    """List the rule catalog: each rule's id, severity and title, and its kinds with their severities."""
    wide().print(catalog_table(discover()))


@click.command("explain")
@click.argument("rule")
def explain_cmd(rule: str) -> None:
    """Print a rule's full documentation."""
    rules = {r.id: r for r in discover()}
    if rule not in rules:
        raise click.UsageError(f"unknown rule {rule!r}; see `txn-audit rules`")
    from rich.console import Console
    from rich.markdown import Markdown

    from auditor.report.rule_docs import rule_markdown

    # wrapped to the terminal (80 columns when piped): the shared console does not wrap, and would
    # crop; lists rather than tables, whose narrow cells would cut a long word of a message; a link's
    # address printed after its text, not hidden in an escape sequence (which a pipe, a file or an
    # older terminal shows as garbage or drops)
    page = Markdown(rule_markdown(rules[rule], tables=False), hyperlinks=False)
    Console(highlight=False).print(page)
