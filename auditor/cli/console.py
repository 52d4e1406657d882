"""Shared rich consoles: results on stdout, diagnostics on stderr."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

out = Console(highlight=False, soft_wrap=True)


def wide() -> Console:
    """Console for wide tables: terminal width on a terminal, 200 columns when piped."""
    import sys

    if out.is_terminal:
        return out
    return Console(file=sys.stdout, highlight=False, width=200)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def safe(text: object) -> str:
    """Escape untrusted text (topic names, transactional ids, paths) for rich markup."""
    return escape(str(text))
