"""How the model names a cluster: one key, Spark and Python alike.

A broker's ``meta.properties`` carries its cluster id; old ZooKeeper-era brokers
may have none. Such a broker is keyed by its log dir (``logdir:<path>``), so two
unrelated dumps without an id are never mistaken for one cluster. Every reader
of the tables — the audit's views, the forensic commands on pyarrow, the coverage
of the input — keys clusters this way, through this module.
"""

from __future__ import annotations

LOGDIR_PREFIX = "logdir:"


def cluster_key(cluster_id: str | None, log_dir: str | None) -> str | None:
    """The cluster's key: its id, else ``logdir:<log dir>`` (None with neither)."""
    if cluster_id is not None:
        return cluster_id
    return None if log_dir is None else f"{LOGDIR_PREFIX}{log_dir}"


def is_log_dir_key(key: str | None) -> bool:
    """True for a key made from a log dir (the broker had no cluster id)."""
    return key is not None and key.startswith(LOGDIR_PREFIX)


def cluster_key_column():
    """:func:`cluster_key` as a Spark column over ``cluster_id`` and ``log_dir``."""
    from pyspark.sql import functions as F

    return F.coalesce("cluster_id", F.concat(F.lit(LOGDIR_PREFIX), F.col("log_dir")))
