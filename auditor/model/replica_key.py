"""The replica key and the broker key, and the one way to join two frames on them.

A *replica* is one broker's copy of a partition: (cluster_id, broker_id, log_dir,
topic, partition). Several brokers' copies are modelled apart, as each broker keeps
its own log, producer state and checkpoints.

Part of the key may be null, and such a replica is still one replica: a partition
directory copied out of its log dir, or a log dir handed over without its
``meta.properties``, has no broker id (``auditor.ingest.plan`` reads it from that
file). SQL's ``=`` never matches a null, so a join on the key by column names
(``df.join(other, REPLICA)``) silently drops every row of such a replica -- a stuck
LSO then goes unreported. :func:`join_replica` matches the key null-safe and is what
every join on the replica key goes through, :func:`join_broker` likewise for a broker's
(cluster_id, broker_id), e.g. its producer.id.expiration.ms (``tests/test_replica_key.py``
finds any other). Grouping and window partitions already treat nulls as equal.

Matching null broker ids is sound because the broker id and the cluster id come from
the same file: a log dir without ``meta.properties`` has neither, and its cluster key is
then the log dir itself (``auditor.model.clusters.cluster_key``), so a null broker id
never stands for two brokers of one cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

REPLICA = ["cluster_id", "broker_id", "log_dir", "topic", "partition"]
BROKER = ["cluster_id", "broker_id"]

_HOW = {"inner": "inner", "left": "left", "left_outer": "left", "leftouter": "left", "full_outer": "full",
        "full": "full", "outer": "full", "fullouter": "full", "left_anti": "left_anti", "leftanti": "left_anti",
        "anti": "left_anti", "left_semi": "left_semi", "leftsemi": "left_semi", "semi": "left_semi"}


def join_replica(left, right, how: str = "inner", on: Sequence[str] = ()):
    """``left.join(right, [*REPLICA, *on], how)``, the replica's columns matched null-safe
    (:func:`join_null_safe`)."""
    return join_null_safe(left, right, REPLICA, how, on)


def join_broker(left, right, how: str = "inner", on: Sequence[str] = ()):
    """``left.join(right, [*BROKER, *on], how)``, the broker's columns matched null-safe
    (:func:`join_null_safe`)."""
    return join_null_safe(left, right, BROKER, how, on)


def join_null_safe(left, right, keys: Sequence[str], how: str = "inner", on: Sequence[str] = ()):
    """``left.join(right, [*keys, *on], how)``, except that ``keys`` match null-safe
    (``<=>``); ``on``'s columns match with ``=`` as in any join.

    The result has the columns a join by names gives, in its order: the keys (the
    right side's where only it has the row, in a full outer join), then the left
    side's other columns, then the right side's (none for a semi or anti join).
    Spark plans ``<=>`` keys as an equi-join, so the physical join (broadcast,
    shuffled hash or sort-merge) is the one the names would get; a broadcast hint on
    ``right`` is kept."""
    from pyspark.sql import functions as F

    kind = _HOW.get(how.lower())
    if kind is None:
        raise ValueError(f"join_null_safe: unsupported join type {how!r}")
    null_safe = list(keys)
    keys = [*null_safe, *on]
    missing = [c for c in keys if c not in left.columns or c not in right.columns]
    if missing:
        raise ValueError(f"join_null_safe: key column(s) {missing} missing on one side")
    r = right.select(*[F.col(c).alias(f"_r_{c}") if c in keys else F.col(c) for c in right.columns])
    cond = [F.col(c).eqNullSafe(F.col(f"_r_{c}")) if c in null_safe else F.col(c) == F.col(f"_r_{c}") for c in keys]
    j = left.join(r, cond, kind)
    rest_left = [F.col(c) for c in left.columns if c not in keys]
    if kind in ("left_anti", "left_semi"):
        return j.select(*keys, *rest_left)
    rest_right = [F.col(c) for c in right.columns if c not in keys]
    if kind == "full":
        key_cols = [F.coalesce(F.col(c), F.col(f"_r_{c}")).alias(c) for c in keys]
        # a null key on both sides stays null; a key present on either side is that side's
        return j.select(*key_cols, *rest_left, *rest_right)
    return j.select(*keys, *rest_left, *rest_right)
