"""The literal pieces of a JSON line, as ``json.dumps`` writes them (default
separators, ``ensure_ascii``): a value's token and a key with its separators.

Kept apart from :mod:`auditor.dump._columns` (which formats whole
columns with numpy) so that ``txn-audit dump``'s compiled path
(:mod:`auditor.dump._native`) builds the same literals without importing numpy.
"""

from __future__ import annotations

import json


def token(value: object) -> bytes:
    """The JSON text of one value, as ``json.dumps`` writes it."""
    return json.dumps(value).encode("ascii")


def key_literal(first: bool, key: str) -> bytes:
    """``{"key": `` or ``, "key": ``."""
    return (b"{" if first else b", ") + token(key) + b": "
