"""Start-up choices for the tool's processes (the decode's Python workers, ``dump``).

Kept apart from the modules that need them so a process pays for what it uses, no more.
"""

from __future__ import annotations

import sys

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
    if _DONE:
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


_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3


def keep_freed_memory() -> None:
    """Let this process reuse the big buffers it frees instead of handing them back
    to the kernel (glibc only; elsewhere nothing happens). For ``dump``.

    Why: a dump allocates and frees a few MiB per chunk (numpy columns, the
    formatted JSON lines) hundreds of times. glibc serves such sizes with fresh
    ``mmap`` pages at first and returns freed memory at the top of the heap, so
    every chunk's buffers are new pages the kernel must fault in and zero:
    ~110,000 page faults, 0.2 s of system time, on 2 M one-record batches.
    With big chunks served from the heap and kept there when freed, the same
    pages are reused: ~22,000 faults. Memory stays bounded: what is kept is what
    one chunk needed.
    """
    if not sys.platform.startswith("linux"):
        return
    import os

    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # the most glibc allows on 64-bit
        libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20)
    except (OSError, ValueError, AttributeError):  # not glibc after all, or no libc handle
        return
