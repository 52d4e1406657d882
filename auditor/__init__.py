"""Offline auditor for Apache Kafka transactions.

Data flows one way: broker files -> decoders (``auditor.formats``) -> tables
(``auditor.ingest``) -> findings (``rules`` on ``auditor.engine``) -> reports.
"""

__version__ = "0.1.0"
