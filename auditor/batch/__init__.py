"""The scheduled batch audit: incremental Delta tables, findings with history.

``txn-audit batch --input DIR... --warehouse WH`` (or the same through
``spark-submit``) keeps a *warehouse* of Delta tables in step with broker log
directories, one run at a time::

    WH/tables/<name>   every table of the ingestion catalog (``auditor.ingest.tables.TABLES``)
                       and the ``files`` inventory, as Delta tables with the Parquet schemas
    WH/ledger          one row per input file: the fingerprint it was decoded at, and in which run
    WH/findings        every finding ever reported, with first/last seen, resolved at, runs seen
    WH/runs            one row per run: attempts, status, files decoded, rows written, timings

Modules: ``deltaio`` (paths, Delta reads and keyed overwrites), ``ledger``
(fingerprints and the change set of a run), ``decode`` (decoding changed files
into the tables), ``audit`` (the rules over Delta tables), ``history`` (the
findings merge), ``runs`` (run numbering and resume), ``crash`` (kill points for
tests) and ``job`` (the run itself, in commit order).
"""
