"""The findings table: one shape for every rule.

A rule returns a DataFrame with any subset of these columns (``rule``,
``severity`` and ``message`` are required); :func:`conform` fills the rest with
nulls and orders them, so reports and the scheduled job read one schema.
``evidence`` is a map of strings so each rule can attach what proves its case
(``evidence['coordinator_state']``) without widening the table.
"""

from __future__ import annotations

FINDING_COLUMNS: list[tuple[str, str]] = [
    ("rule", "string"),
    ("severity", "string"),
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
    ("message", "string"),
    ("evidence", "map<string,string>"),
    ("remediation", "string"),
]


def conform(df, rule_id: str):
    """Select the findings columns (in order, with types), nulls for missing ones."""
    from pyspark.sql import functions as F

    cols = []
    present = set(df.columns)
    for name, typ in FINDING_COLUMNS:
        if name == "rule":
            cols.append(F.lit(rule_id).alias("rule"))
        elif name in present:
            cols.append(F.col(name).cast(typ).alias(name))
        else:
            cols.append(F.lit(None).cast(typ).alias(name))
    return df.select(*cols)


def evidence(**pairs):
    """``F.create_map`` from keyword pairs of columns/literals, values cast to string."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    args = []
    for k, v in pairs.items():
        args.append(F.lit(k))
        args.append((v if isinstance(v, Column) else F.lit(v)).cast("string"))
    return F.create_map(*args)
