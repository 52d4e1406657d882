"""Shared rich consoles: results on stdout, diagnostics on stderr, and :func:`safe`,
the one function every human-readable output passes untrusted text through."""

from __future__ import annotations

import re

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

# C0 controls (ESC, BEL, CR, LF, TAB, ...), DEL, C1 controls (a lone 0x9b is a CSI on some
# terminals), and the Unicode line/paragraph separators and bidirectional overrides, which
# can make a terminal line show something else than it holds ("Trojan Source")
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(m: re.Match) -> str:
    c = m.group(0)
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def safe(text: object, markup: bool = True) -> str:
    """Untrusted text (topic names, transactional and group ids, paths, messages) made fit
    for a terminal: control characters shown escaped (``ESC`` as ``\\x1b``, newline as
    ``\\n``), so a name cannot retitle, clear or rewrite the operator's terminal or forge
    lines; with ``markup`` (for rich markup strings) rich's ``[...]`` syntax escaped too.
    Use ``markup=False`` for text that goes into ``rich.text.Text`` or plain output.
    JSON output needs none of this (the encoder escapes), nor HTML (``html.escape``)."""
    s = _UNSAFE.sub(_escaped, str(text))
    return escape(s) if markup else s
