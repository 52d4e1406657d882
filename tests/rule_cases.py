"""Rule cases as data: ``tests/rules/<rule-id>/<case>.yaml`` (run by ``tests/test_rule_cases.py``).

A case file holds

* ``description`` — what the case shows (one paragraph);
* ``input`` — the table rows, as a list of :class:`tables_builder.TableSet` calls
  ``- <method>: {<keyword>: <value>, ...}`` (``batch``, ``marker``, ``txn``,
  ``tombstone``, ``checkpoint``, ``snapshot_entry``, ``txnindex_entry``,
  ``pid_block``, ``offset_commit``, ``config``, ``inventory_file``, ``cleaner_checkpoint``, ``clean_shutdown``,
  ``not_given``,
  ``remote_segment``); a time may be
  written ``T0``, ``T0+2h``, ``T0-100`` (ms, or with a unit ``s``/``m``/``h``/``d``);
* ``other_cluster`` (optional) — rows put in a second cluster of their own, which
  must not change this case's findings (what a rule must keep apart per cluster);
* ``options`` (optional) — :class:`auditor.engine.context.AuditOptions` fields (times
  as in ``input``); cases with options are audited apart from the others, grouped by
  their options;
* ``example`` (optional) — ``true`` for the one case per rule whose first finding
  the rule's documentation shows (``txn-audit explain``, ``docs/rules.md``; after
  changing it, run ``scripts/build_docs.py``);
* ``findings`` — every finding of the case's rule in the case's cluster, whole
  (every column of the findings table), or ``[]``.

Every case is its own cluster, ``case:<rule-id>/<case>``, so all cases fit in one
table set and one audit: the rules key their work by cluster.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from auditor.engine.findings import FINDING_COLUMNS
from tables_builder import T0, TableSet

CASES_DIR = Path(__file__).resolve().parent / "rules"
CALLS = ("batch", "marker", "txn", "tombstone", "checkpoint", "snapshot_entry", "txnindex_entry", "pid_block",
         "remote_segment", "leader_epoch",
         "offset_commit", "config", "leader", "inventory_file", "cleaner_checkpoint", "clean_shutdown", "not_given")
KEYS = {"description", "input", "other_cluster", "options", "example", "findings"}
COLUMNS = [name for name, _ in FINDING_COLUMNS]

_TIME = re.compile(r"T0((?:[+-]\d+(?:ms|s|m|h|d)?)*)")
_TERM = re.compile(r"([+-])(\d+)(ms|s|m|h|d)?")
_UNIT = {"": 1, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class Case:
    rule: str
    name: str
    path: Path
    description: str
    input: list
    findings: list
    other_cluster: list = field(default_factory=list)
    options: dict = field(default_factory=dict)
    example: bool = False

    @property
    def id(self) -> str:
        return f"{self.rule}/{self.name}"

    @property
    def cluster(self) -> str:
        return f"case:{self.id}"

    @property
    def other(self) -> str:
        return f"{self.cluster}#other"


def load_cases(root: Path = CASES_DIR) -> list[Case]:
    cases = []
    for path in sorted(root.glob("*/*.yaml")):
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: {exc}") from exc
        unknown = set(data) - KEYS
        missing = {"description", "input", "findings"} - set(data)
        if unknown or missing:
            raise ValueError(f"{path}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
        cases.append(Case(rule=path.parent.name, name=path.stem, path=path, description=data["description"].strip(),
                          input=data["input"], findings=data["findings"] or [],
                          other_cluster=data.get("other_cluster") or [], options=data.get("options") or {},
                          example=bool(data.get("example"))))
    return cases


def time_value(v):
    """``T0+2h`` and the like as epoch milliseconds; anything else as it is (lists and dicts walked)."""
    if isinstance(v, list):
        return [time_value(x) for x in v]
    if isinstance(v, dict):
        return {k: time_value(x) for k, x in v.items()}
    if isinstance(v, str):
        m = _TIME.fullmatch(v)
        if m:
            return T0 + sum((1 if s == "+" else -1) * int(n) * _UNIT[u] for s, n, u in _TERM.findall(m.group(1)))
    return v


def add_case(t: TableSet, case: Case) -> None:
    """The case's rows into ``t``, under its cluster (and its ``other_cluster`` rows under another)."""
    for cluster, calls in ((case.cluster, case.input), (case.other, case.other_cluster)):
        t.cluster = cluster
        for i, call in enumerate(calls):
            if not isinstance(call, dict) or len(call) != 1 or next(iter(call)) not in CALLS:
                raise ValueError(f"{case.path}: input item {i} is not one of {CALLS}: {call!r}")
            (method, kwargs), = call.items()
            getattr(t, method)(**time_value(kwargs or {}))


def canonical(findings: list[dict]) -> list[dict]:
    """Findings in one order (by their JSON text), to compare them whole."""
    return sorted(findings, key=lambda f: json.dumps(f, sort_keys=True, default=str))


# -- writing expectations (REGEN_RULE_CASES) ----------------------------------------


class _Dumper(yaml.SafeDumper):
    """Findings as block mappings; short mappings and lists of scalars on one line."""


def _short(data, limit: int) -> bool:
    values = data.values() if isinstance(data, dict) else data
    return all(not isinstance(v, (dict, list)) for v in values) and len(json.dumps(data, default=str)) <= limit


_Dumper.add_representer(dict, lambda d, data: d.represent_mapping(
    "tag:yaml.org,2002:map", data, flow_style=_short(data, 60)))
_Dumper.add_representer(list, lambda d, data: d.represent_sequence(
    "tag:yaml.org,2002:seq", data, flow_style=_short(data, 100)))


def findings_yaml(findings: list[dict]) -> str:
    """The ``findings:`` block of a case file (columns in the findings table's order)."""
    ordered = [{c: f.get(c) for c in COLUMNS} for f in sorted(findings, key=_location)]
    return yaml.dump({"findings": ordered}, Dumper=_Dumper, sort_keys=False, width=1_000_000, allow_unicode=True)


def _location(f: dict) -> tuple:
    return tuple((f.get(c) is None, f.get(c) if f.get(c) is not None else 0) for c in (
        "topic", "partition", "first_offset", "last_offset", "producer_id", "transactional_id", "kind", "broker_id"))


def write_findings(case: Case, findings: list[dict]) -> None:
    """Replace the ``findings:`` block (the file's last key) with ``findings``; the rest of
    the file, comments included, stays as written."""
    text = case.path.read_text()
    m = re.search(r"^findings:", text, re.M)
    if m is None:
        raise ValueError(f"{case.path}: no findings: line")
    case.path.write_text(text[:m.start()] + findings_yaml(findings))
