"""Findings from detections: what a rule's kind says, rendered for people.

A rule detects (location, ``kind``, typed evidence); this module turns a
detection into a finding with the kind's severity, its message, its advice and
its paste-ready commands (:class:`auditor.engine.rule.Kind`). Templates are
``str.format`` fields over the detection's columns and evidence, with these specs:

* ``{duration_ms:duration}`` — ``3m12s``; ``{first_timestamp:time}`` — ISO-8601 UTC;
* ``{consumer_groups:list}`` — ``a, b``;
* ``{coordinator_epoch:default=0}`` — the value, or ``0`` when it is unknown;
* ``{compacted:if}`` — nothing (for a condition inside ``[[...]]``).

Text inside ``[[...]]`` is left out when a field in it is empty (null, ``""``,
``[]`` or false); text inside ``[[!...]]`` is kept only when every field in it is empty. An empty field outside such a group shows as ``?`` in a
message; a command that needs an empty field is left out (it could not run).
In commands, a value with characters a shell would read is single-quoted.

The findings an audit returns and stores carry their rendered text; the rule's ``Kind`` holds
the templates, so a report can render a stored finding again (``txn-audit explain``, the rule
docs) with this module.
"""

from __future__ import annotations

import re
import shlex
import string
from datetime import datetime, timezone
from typing import Any

from auditor.engine.findings import DETECTION_COLUMNS
from auditor.engine.rule import Rule

_GROUP = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)
_SHELL_SAFE = re.compile(r"[A-Za-z0-9._:/=<>@+-]+")


def format_time(ms: int | None) -> str:
    """Epoch ms as ISO-8601 UTC with milliseconds (how every format prints instants)."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def format_duration(ms: int | None) -> str:
    """Short human duration (``850ms``, ``42s``, ``3m12s``, ``5h07m``, ``2d03h``)."""
    if ms is None:
        return ""
    ms = int(ms)
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms}ms"
    s = ms // 1000
    if s < 60:
        return f"{sign}{s}s"
    if s < 3600:
        return f"{sign}{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{sign}{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{sign}{s // 86400}d{(s % 86400) // 3600:02d}h"


class _Missing(Exception):
    pass


def _empty(v: Any) -> bool:
    return v is None or v is False or v == "" or v == []


class _Formatter(string.Formatter):
    def __init__(self, quote: bool, strict: bool):
        super().__init__()
        self.quote, self.strict = quote, strict

    def get_value(self, key, args, kwargs):
        if key not in kwargs:
            raise KeyError(f"template field {key!r} is neither a finding column nor evidence")
        return kwargs[key]

    def format_field(self, value: Any, spec: str) -> str:
        if spec.startswith("default="):
            value, spec = (spec[len("default="):] if value is None else value), ""
        if spec == "if":
            return ""
        if value is None:
            if self.strict:
                raise _Missing
            return "?"
        if spec == "duration":
            text = format_duration(value)
        elif spec == "time":
            text = format_time(value)
        elif spec == "list":
            text = ", ".join(str(v) for v in value)
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = format(value, spec)
        if self.quote and not _SHELL_SAFE.fullmatch(text):
            text = shlex.quote(text)
        return text


def _fields_in(template: str) -> list[str]:
    return [f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(template) if f]


def fill(template: str, fields: dict, *, command: bool = False) -> str | None:
    """``template`` rendered over ``fields`` (see the module doc); ``None`` for a
    command that needs a field that is empty."""
    def group(m: re.Match) -> str:
        inner = m.group(1)
        if inner.startswith("!"):  # the opposite: only when every field in it is empty
            return inner[1:] if all(_empty(fields.get(f)) for f in _fields_in(inner[1:])) else ""
        if any(_empty(fields.get(f)) for f in _fields_in(inner)):
            return ""
        return inner

    text = _GROUP.sub(group, template)
    try:
        return _Formatter(quote=command, strict=command).vformat(text, (), fields)
    except _Missing:
        return None


def readable(template: str) -> str:
    """A template as people read it (``txn-audit explain``, docs/rules.md): each field as
    ``<field>`` (its format spec dropped; an ``:if`` condition is left out), each optional part ``[[...]]`` (and ``[[!...]]``,
    kept when its fields are empty) as ``[...]``."""
    def fields(text: str) -> str:
        return "".join(lit + (f"<{name}>" if name is not None and spec != "if" else "")
                       for lit, name, spec, _ in string.Formatter().parse(text))

    out, last = [], 0
    for m in _GROUP.finditer(template):
        out += [fields(template[last:m.start()]), "[" + fields(m.group(1).lstrip("!")) + "]"]
        last = m.end()
    out.append(fields(template[last:]))
    return "".join(out)


def template_fields(rule: Rule) -> set[str]:
    """Every field the templates of ``rule`` name (checked against its columns and evidence)."""
    names: set[str] = set()
    for k in rule.kinds.values():
        for t in (k.message, k.advice, *(c.template for c in k.commands)):
            names.update(_fields_in(_GROUP.sub(lambda m: m.group(1).lstrip("!"), t)))
    return names


def render(rule: Rule, det: dict) -> dict:
    """The finding of one detection (``det``: the detection columns, ``kind`` and
    typed ``evidence``)."""
    kind = rule.kinds.get(det.get("kind"))
    if kind is None:
        raise ValueError(f"rule {rule.id}: detection of unknown kind {det.get('kind')!r}")
    ev = dict(det.get("evidence") or {})
    loc = {name: det.get(name) for name, _ in DETECTION_COLUMNS}
    fields = {**ev, **loc}
    commands = []
    for c in kind.commands:
        text = fill(c.template, fields, command=True)
        if text is not None:
            commands.append({"command": text, "applies_to": c.applies_to})
    return {
        "rule": rule.id, "severity": kind.severity, "kind": det["kind"], **loc,
        "message": fill(kind.message, fields),
        "evidence": ev,
        "remediation": fill(kind.advice, fields) or None,
        "remediation_commands": commands,
        "replicas": det.get("replicas"),
    }


def render_stored(finding: dict) -> dict:
    """A stored finding (a findings directory's row, its evidence typed) with today's text of its
    kind: message, remediation and commands rendered again from its columns and evidence, so
    ``report FINDINGS`` says what ``scan`` says, whichever release wrote the directory. Its severity
    stays the stored one (what ``--fail-on`` judged when it was written); a rule or kind the catalog
    no longer has, or evidence its templates cannot fill, keeps the stored text."""
    from auditor.engine.rule import catalog

    rule = catalog().get(finding.get("rule"))
    if rule is None or finding.get("kind") not in rule.kinds:
        return finding
    try:
        again = render(rule, finding)
    except (KeyError, ValueError, TypeError, IndexError):
        return finding
    return {**finding, **{k: again[k] for k in ("message", "remediation", "remediation_commands")}}
