"""No pandas in the decode's Python workers (switch ``no_pandas``, :mod:`auditor.perf`).

Kept apart from the modules that need it so a process pays for what it uses, no more.
"""

from __future__ import annotations

import sys

from auditor.perf import enabled

_DONE = False


def skip_pandas() -> None:
    """Keep pandas out of a Python worker of the decode, which has no use for it.

    Why: PySpark's requirements install pandas, and importing it costs
    0.2-0.7 s of CPU, but nothing of the tool uses it (tables go to Spark as
    Arrow, never as pandas frames). pyarrow imports it anyway the first time it
    converts a Python sequence (``pa.array`` of a list, ``Table.from_pylist``:
    every decoder does), to see whether the sequence is a pandas object.
    :mod:`auditor.ingest.envelope` (what a decode task unpickles first) calls
    this before importing the decoders. (The driver imports pandas all the
    same: PySpark's ``mapInArrow`` and ``createDataFrame`` ask for it.)

    How: for one conversion, an import finder under which ``import pandas``
    fails as if pandas were not installed; pyarrow asks once per process and
    keeps the answer "no pandas". Later imports of pandas work as usual (pyarrow
    imports it itself for ``Table.to_pandas``). Does nothing when pandas was
    imported already (someone wanted it) or on a second call.
    """
    global _DONE
    if _DONE or not enabled("no_pandas"):
        return
    _DONE = True
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    blocker = _NoPandas()
    sys.meta_path.insert(0, blocker)
    try:
        pa.array(["pandas?"])  # pyarrow's one look for pandas: it finds none and keeps that answer
    finally:
        sys.meta_path.remove(blocker)


class _NoPandas:
    """An import finder under which ``import pandas`` fails as if it were not installed."""

    def find_spec(self, name: str, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
