"""The copies of a partition in the input, and what the input shows of why one lags another.

One partition may be in the input several times: each broker's replica (a leader and its
followers), a ``-future`` replica a broker is moving between its log dirs
(``AlterReplicaLogDirs``: it copies the partition from the broker's current replica and serves no
client until it replaces it), a reassignment's new replica still catching up, two dumps of one
broker taken at different times. Each is a replica of its own (:mod:`auditor.model.replica_key`:
the log dir keeps them apart). When one copy holds a transaction's marker and another ends before
it, the other is behind, not hanging (:func:`auditor.model.verdicts.open_transaction_evidence`),
and why it may be behind is what an operator asks next; the facts that tell are gathered here,
once per replica:

* ``future_replica`` — its partition directory is ``<topic>-<partition>.<uuid>-future`` (the
  ``files`` inventory's ``dir_status``, :mod:`auditor.ingest.discovery`);
* ``log_dir_stopped`` — its log dir holds ``.kafka_cleanshutdown`` (the broker stopped cleanly and
  did not start again: :func:`auditor.model.moving.stopped_log_dirs`); false where it does not
  (crashed, killed, or still running when read); null without an inventory;
* ``log_dir_newest_ms`` — the newest batch timestamp of any partition in its log dir: a broker
  that died wrote nothing after it (compared with the other copy's marker, whose timestamp is the
  clock of the leader that wrote it);
* ``log_start_offset`` — where its log starts (:func:`auditor.model.replica.replica_facts`): a
  replica created later, by a reassignment, starts at its leader's log start of that time;
* ``adding`` — the brokers the metadata log's newest record of the partition lists as being added
  (``addingReplicas`` of its ``PartitionRecord`` / ``PartitionChangeRecord``: a reassignment not
  yet complete); null without a metadata log, or where no record sets it.
"""

from __future__ import annotations

from auditor.model.replica_key import REPLICA, join_replica

COPY_COLUMNS = ("future_replica", "log_dir_stopped", "log_dir_newest_ms", "log_start_offset", "adding")


def future_replicas(files):
    """Per replica of the ``files`` inventory (the replica's columns): ``future_replica``, true
    when its files are in a ``-future`` partition directory (a move between the broker's log dirs)."""
    from pyspark.sql import functions as F

    return files.where("topic IS NOT NULL AND dir_status IN ('live', 'future')").groupBy(*REPLICA).agg(
        F.max((F.col("dir_status") == "future").cast("int")).cast("boolean").alias("future_replica"))


def adding_replicas(metadata_records):
    """Per partition (cluster_id, topic, partition): ``adding``, the ``addingReplicas`` of the
    metadata log's newest ``PartitionRecord`` or ``PartitionChangeRecord`` that sets them (a change
    record leaves them out when they do not change; the record completing a reassignment sets them
    empty). Topics are named by their ``TopicRecord``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from auditor.model.groups import topic_names

    raw = F.get_json_object("data_json", "$.addingReplicas")
    p = metadata_records.where(
        "record_type IN ('PARTITION_RECORD', 'PARTITION_CHANGE_RECORD') AND topic_id IS NOT NULL")
    p = p.select("cluster_id", "topic_id", F.col("partition_id").alias("partition"), "offset",
                 F.from_json(raw, "array<int>").alias("adding")).where("adding IS NOT NULL")
    newest = Window.partitionBy("cluster_id", "topic_id", "partition").orderBy(F.col("offset").desc())
    p = p.withColumn("_n", F.row_number().over(newest)).where("_n = 1")
    return p.join(topic_names(metadata_records), ["cluster_id", "topic_id"]).select(
        "cluster_id", F.col("topic_name").alias("topic"), "partition", "adding")


def copy_facts(partitions, *, log_dirs=None, future=None, adding=None):
    """Per replica of ``partitions`` (:func:`auditor.model.replica.replica_facts`): the
    :data:`COPY_COLUMNS` (see the module). ``log_dirs``: :func:`auditor.model.moving.stopped_log_dirs`;
    ``future``: :func:`future_replicas`; ``adding``: :func:`adding_replicas`; each None when the
    input has no inventory / no metadata log (its columns are then null, or false for
    ``future_replica``: nothing says the directory is a ``-future`` one)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    per_dir = Window.partitionBy("cluster_id", "broker_id", "log_dir")
    c = partitions.select(*REPLICA, "log_start_offset",
                          F.max("max_timestamp").over(per_dir).alias("log_dir_newest_ms"))
    if log_dirs is not None:
        c = c.join(F.broadcast(log_dirs), ["cluster_id", "log_dir"], "left")
    else:
        c = c.withColumn("log_dir_stopped", F.lit(None).cast("boolean"))
    if future is not None:
        c = join_replica(c, F.broadcast(future), "left").withColumn(
            "future_replica", F.coalesce(F.col("future_replica"), F.lit(False)))
    else:
        c = c.withColumn("future_replica", F.lit(False))
    if adding is not None:
        c = c.join(F.broadcast(adding), ["cluster_id", "topic", "partition"], "left")
    else:
        c = c.withColumn("adding", F.lit(None).cast("array<int>"))
    return c.select(*REPLICA, *COPY_COLUMNS)
