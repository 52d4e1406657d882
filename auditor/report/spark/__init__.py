"""The Spark side of the report layer: what a report shows besides the findings, computed at
audit time while the tables are at hand (:mod:`auditor.report.spark.data`) and saved with the
findings, so that the rest of :mod:`auditor.report` renders them without Spark."""
