"""Broker and topic configuration the model reads from the metadata log.

A KRaft cluster keeps its dynamic configs in ``__cluster_metadata`` as
``ConfigRecord``s: the latest record of a (resource, name) is the value in
force. Two settings change what the model concludes:

* a topic's ``cleanup.policy`` (resource type 2): a compacted topic's cleaner
  may remove data and empty markers (:func:`compacted_topics`, read by
  :func:`auditor.model.replica.replica_facts`);
* a broker's ``producer.id.expiration.ms`` (resource type 4: the broker's own
  record, else the cluster-wide default, the record with an empty resource
  name): when the broker forgets an idle producer (:func:`producer_id_expiration`).

A ZooKeeper cluster keeps them in ZooKeeper and a static setting is in
server.properties: neither is on disk, and Kafka's defaults are assumed.
"""

from __future__ import annotations

from auditor.model.replica_key import join_broker

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4  # ConfigResource.Type
COMPACTED_TOPICS_SCHEMA = "cluster_id string, topic string, config_compact boolean"


def latest_config(metadata_records, resource_type: int, name: str):
    """The newest ``ConfigRecord`` of ``name`` per (cluster, resource) of ``resource_type``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    c = metadata_records.where(
        f"record_type = 'CONFIG_RECORD' AND config_resource_type = {resource_type} AND config_name = '{name}'")
    w = Window.partitionBy("cluster_id", "config_resource_name").orderBy(F.col("offset").desc())
    return c.withColumn("_rn", F.row_number().over(w)).where("_rn = 1")


def compacted_topics(metadata_records):
    """(cluster_id, topic, config_compact): topics whose latest ``cleanup.policy``
    in the metadata log is set, ``config_compact`` when it includes compact
    (:data:`COMPACTED_TOPICS_SCHEMA`; without a metadata log there are none)."""
    from pyspark.sql import functions as F

    c = latest_config(metadata_records, TOPIC_RESOURCE, "cleanup.policy")
    return c.select("cluster_id", F.col("config_resource_name").alias("topic"),
                    F.coalesce(F.col("config_value").contains("compact"), F.lit(False)).alias("config_compact"))


def producer_id_expiration(batches, log_dir_coverage, metadata_records, *, default_ms: int):
    """(cluster_id, broker_id, producer_id_expiration_known, producer_id_expiration_ms) for
    every broker of ``batches``: its ``producer.id.expiration.ms`` in the metadata log
    (its own record, else the cluster-wide default), ``default_ms`` otherwise, or
    for all when ``metadata_records`` is None (the input has no metadata log).

    ``producer_id_expiration_known``: whether the input can show the setting
    (``log_dir_coverage``, :mod:`auditor.model.coverage`): a KRaft broker's
    partitions given without the cluster's metadata log cannot."""
    from pyspark.sql import functions as F

    brokers = batches.select("cluster_id", "broker_id").distinct()
    known = log_dir_coverage.groupBy("cluster_id", "broker_id").agg(
        F.min(F.col("producer_id_expiration_known").cast("int")).alias("_known"))
    brokers = join_broker(brokers, F.broadcast(known), "left").select(
        "cluster_id", "broker_id", F.coalesce(F.col("_known") == 1, F.lit(True)).alias("producer_id_expiration_known"))
    default = F.lit(default_ms).cast("long")
    if metadata_records is None:
        return brokers.withColumn("producer_id_expiration_ms", default)
    c = latest_config(metadata_records, BROKER_RESOURCE, "producer.id.expiration.ms").select(
        "cluster_id", F.col("config_resource_name").alias("_name"), F.col("config_value").cast("long").alias("_v"))
    own = c.where("_name != ''").select("cluster_id", F.col("_name").cast("int").alias("broker_id"), F.col("_v").alias("_own"))
    cluster = c.where("_name = ''").select("cluster_id", F.col("_v").alias("_cluster"))
    return (join_broker(brokers, own, "left").join(cluster, "cluster_id", "left")
            .select("cluster_id", "broker_id", "producer_id_expiration_known",
                    F.coalesce("_own", "_cluster", default).alias("producer_id_expiration_ms")))
