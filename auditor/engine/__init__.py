"""The audit engine: the rule catalog run over ingested tables into one findings table.

* :mod:`.rule` — what a rule is (the contract every module of :mod:`auditor.rules` keeps);
* :mod:`.findings` — the findings table's one schema, for every rule;
* :mod:`.messages` — a finding's severity, message and commands, from its rule's kind;
* :mod:`.context` — table access (the live log, Parquet or Delta) and the cache of views;
* :mod:`.views` — the view registry: each derived fact one call of an :mod:`auditor.model` function;
* :mod:`.runner` — the audit: rules planned, collected (:mod:`.collect`) with the readers it is
  given (the report data), decided and written.

Where a table's rows are, for readers without Spark, is :mod:`auditor.tables.source`.

The Spark session is :mod:`auditor.spark`, the ingest job :mod:`auditor.ingest.spark_job`, the
report data :mod:`auditor.report.spark`, the performance machinery :mod:`auditor.perf`.
"""
