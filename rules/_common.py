"""Column expressions several rules share (not a rule: modules starting with _ are skipped)."""

from __future__ import annotations


def abort_command(topic, partition, start_offset, producer_id, producer_epoch, coordinator_epoch):
    """The paste-able ``kafka-transactions.sh abort`` lines (KIP-664), both forms."""
    from pyspark.sql import functions as F

    return F.concat(
        F.lit("kafka-transactions.sh --bootstrap-server <broker:port> abort --topic "), topic,
        F.lit(" --partition "), partition.cast("string"),
        F.lit(" --start-offset "), start_offset.cast("string"),
        F.lit("   # brokers before 3.0: kafka-transactions.sh --bootstrap-server <broker:port> abort --topic "), topic,
        F.lit(" --partition "), partition.cast("string"),
        F.lit(" --producer-id "), producer_id.cast("string"),
        F.lit(" --producer-epoch "), producer_epoch.cast("string"),
        F.lit(" --coordinator-epoch "), F.greatest(F.coalesce(coordinator_epoch, F.lit(0)), F.lit(0)).cast("string"),
    )


def ms_text(ms):
    """Human duration (e.g. ``3h12m``) for messages."""
    from pyspark.sql import functions as F

    s = (ms / 1000).cast("long")
    return F.when(ms.isNull(), F.lit("?")).when(s < 60, F.concat(s.cast("string"), F.lit("s"))).when(
        s < 3600, F.concat((s / 60).cast("long").cast("string"), F.lit("m"), (s % 60).cast("string"), F.lit("s"))
    ).when(s < 86400, F.concat((s / 3600).cast("long").cast("string"), F.lit("h"), ((s % 3600) / 60).cast("long").cast("string"), F.lit("m"))
    ).otherwise(F.concat((s / 86400).cast("long").cast("string"), F.lit("d"), ((s % 86400) / 3600).cast("long").cast("string"), F.lit("h")))
