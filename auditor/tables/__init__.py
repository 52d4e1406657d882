"""Where the ingested tables' rows are, for every reader.

The same tables come in two layouts: a directory of Parquet parts per table
(``ingest``, ``scan``) and a Delta table per table (the batch job's warehouse).
:mod:`.source` tells them apart and opens a table's current rows without Spark;
:mod:`.versions` digests the code that wrote and reads them (a decoded file, an audit of
tables, are redone when it changes). Neither imports anything of ``auditor``, so the model,
engine, forensics, ingest, batch job and CLI can all use them.
"""
