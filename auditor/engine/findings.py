"""The findings table: one shape for every rule.

A rule returns *detections* (:class:`auditor.engine.rule.Rule`): any subset of
:data:`DETECTION_COLUMNS`, a ``kind`` and a typed ``evidence`` struct.
:func:`conform` gives them one schema (nulls for missing columns, the evidence
checked against the rule's declaration and carried as JSON so every rule's rows
fit one union); :mod:`auditor.engine.messages` then adds what the kind says
(severity, message, remediation) and :func:`group_replicas` folds the copies of
one finding that several replicas of a partition show.

On disk (Parquet findings directory, the batch job's Delta table) ``evidence``
is a ``map<string,string>`` so one table holds every rule's evidence; strings
are kept as they are and other values as JSON text, and :func:`typed_evidence`
gives them back their declared types.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:  # pragma: no cover
    from auditor.engine.rule import Rule

# where and whom a finding is about: what a rule's detections may carry
DETECTION_COLUMNS: list[tuple[str, str]] = [
    ("cluster_id", "string"),
    ("broker_id", "int"),
    ("log_dir", "string"),
    ("topic", "string"),
    ("partition", "int"),
    ("producer_id", "bigint"),
    ("producer_epoch", "int"),
    ("transactional_id", "string"),
    ("first_offset", "bigint"),
    ("last_offset", "bigint"),
    ("first_timestamp", "bigint"),
    ("last_timestamp", "bigint"),
    ("duration_ms", "bigint"),
]

REPLICAS_TYPE = "array<struct<broker_id:int,log_dir:string>>"
COMMANDS_TYPE = "array<struct<command:string,applies_to:string>>"

FINDING_COLUMNS: list[tuple[str, str]] = [
    ("rule", "string"),
    ("severity", "string"),
    ("kind", "string"),
    *DETECTION_COLUMNS,
    ("message", "string"),
    ("evidence", "map<string,string>"),
    ("remediation", "string"),  # advice around the commands (prose)
    ("remediation_commands", COMMANDS_TYPE),
    ("replicas", REPLICAS_TYPE),  # every replica that shows the finding (broker_id/log_dir: the first)
]


def findings_arrow_schema():
    """:data:`FINDING_COLUMNS` as an Arrow schema (the findings directory's Parquet)."""
    import pyarrow as pa

    scalar = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64()}
    special = {
        "map<string,string>": pa.map_(pa.string(), pa.string()),
        REPLICAS_TYPE: pa.list_(pa.struct([("broker_id", pa.int32()), ("log_dir", pa.string())])),
        COMMANDS_TYPE: pa.list_(pa.struct([("command", pa.string()), ("applies_to", pa.string())])),
    }
    return pa.schema([pa.field(n, scalar.get(t) or special[t]) for n, t in FINDING_COLUMNS])


def conform(df, rule: "Rule"):
    """The rule's detections in one schema: ``rule``, ``kind``, the detection
    columns (typed, nulls for missing ones) and ``evidence`` as a JSON object of
    exactly the declared fields. A field the rule declares but does not emit, or
    emits but does not declare, fails here, before any job runs."""
    from pyspark.sql import functions as F

    present = set(df.columns)
    if "kind" not in present:
        raise ValueError(f"rule {rule.id}: detections have no kind column")
    declared = rule.evidence_types
    emitted = set()
    if "evidence" in present:
        emitted = {f.name for f in df.schema["evidence"].dataType.fields}
    if emitted != set(declared):
        raise ValueError(f"rule {rule.id}: evidence emitted but not declared {sorted(emitted - set(declared))}, "
                         f"declared but not emitted {sorted(set(declared) - emitted)}")
    cols = [F.lit(rule.id).alias("rule"), F.col("kind").cast("string").alias("kind")]
    for name, typ in DETECTION_COLUMNS:
        cols.append((F.col(name).cast(typ) if name in present else F.lit(None).cast(typ)).alias(name))
    ev = F.struct(*[F.col("evidence")[n].cast(t).alias(n) for n, t in declared.items()]) if declared \
        else F.struct(F.lit(None).cast("string").alias("_"))
    cols.append(F.to_json(ev, {"ignoreNullFields": "false"}).alias("evidence"))
    return df.select(*cols)


def detection(row: dict, rule: "Rule") -> dict:
    """A collected row of :func:`conform` as a dict with typed evidence."""
    out = dict(row)
    raw = out.get("evidence")
    ev = json.loads(raw) if isinstance(raw, str) else dict(raw or {})
    out["evidence"] = {k: ev.get(k) for k in rule.evidence_types}
    return out


def evidence(declared, **pairs):
    """The ``evidence`` struct of a rule's declared fields (``declared``: its
    :class:`~auditor.engine.rule.Evidence` tuple), in declared order and types,
    from keyword pairs of columns or literals; a field not given is null (parts
    of one rule that are unioned then share one struct type). A name that is not
    declared fails at once."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    names = {e.name for e in declared}
    unknown = sorted(set(pairs) - names)
    if unknown:
        raise ValueError(f"evidence not declared: {unknown}")
    cols = []
    for e in declared:
        v = pairs.get(e.name)
        v = v if isinstance(v, Column) else F.lit(v)
        cols.append(v.cast(e.type).alias(e.name))
    return F.struct(*cols)


# -- storage ----------------------------------------------------------------------


def stored_evidence(ev: dict | None) -> list[tuple[str, str | None]]:
    """Evidence as the findings table's ``map<string,string>`` pairs: strings as
    they are, other values as JSON text."""
    out = []
    for k, v in (ev or {}).items():
        out.append((k, v if v is None or isinstance(v, str) else json.dumps(v)))
    return out


def typed_evidence(rule_id: str, ev) -> dict:
    """Stored evidence (pairs or dict of strings) with the declared types of
    ``rule_id``'s evidence; a key the catalog does not declare (an older
    release's) stays a string."""
    from auditor.engine.rule import catalog

    pairs = dict(ev or {}) if not isinstance(ev, dict) else ev
    rule = catalog().get(rule_id)
    types = rule.evidence_types if rule else {}
    out = {}
    for k, v in pairs.items():
        t = types.get(k, "string")
        if v is None or t == "string" or not isinstance(v, str):
            out[k] = v
            continue
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


# -- replicas ---------------------------------------------------------------------

_REPLICA_KEYS = ("broker_id", "log_dir")


def group_replicas(findings: Iterable[dict]) -> list[dict]:
    """One finding per subject: findings equal in everything but the replica
    (broker, log dir) become one, listing every replica in ``replicas`` (sorted;
    ``broker_id``/``log_dir`` are the first's). Replicas that disagree (another
    last offset, other evidence) stay separate findings."""
    groups: dict[str, dict] = {}
    order: list[str] = []
    for f in findings:
        key = json.dumps({k: v for k, v in f.items() if k not in (*_REPLICA_KEYS, "replicas")},
                         sort_keys=True, default=str)
        reps = f.get("replicas") or [{"broker_id": f.get("broker_id"), "log_dir": f.get("log_dir")}]
        g = groups.get(key)
        if g is None:
            groups[key] = g = {**f, "replicas": []}
            order.append(key)
        for r in reps:
            if r not in g["replicas"]:
                g["replicas"].append(r)
    out = []
    for key in order:
        g = groups[key]
        reps = [r for r in g["replicas"] if r.get("broker_id") is not None or r.get("log_dir") is not None]
        reps.sort(key=lambda r: (r.get("broker_id") is None, r.get("broker_id") or 0, r.get("log_dir") or ""))
        g["replicas"] = reps
        if reps:
            g["broker_id"], g["log_dir"] = reps[0]["broker_id"], reps[0]["log_dir"]
        out.append(g)
    return out
