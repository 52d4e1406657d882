"""Spark-free decoders for every file a Kafka broker keeps on disk.

Each module turns bytes (or a file opened read-only) into plain typed rows
(dicts whose keys are the column names documented in ``docs/tables.md``).
Nothing here imports Spark, so every decoder is unit-testable on its own and
runs unchanged inside a Spark task on an executor.
"""
