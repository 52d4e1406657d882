"""The Spark session: one factory (:mod:`auditor.spark.session`) for the CLI, the batch job and
the tests, with its Delta Lake settings and its JVM's log. What spares the session work (the
class-data sharing archive, cached Py4J look-ups, small-input settings) is :mod:`auditor.perf`."""
