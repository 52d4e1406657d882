"""``txn-audit dump``'s compiled path for log segments (``auditor/dump/_dumpv2.c``).

Why: a dump is a whole process a person waits for, and on a few MB of small
batches most of it was start-up -- numpy's import alone (~60 ms here) is more
than the compiled walk takes for 100,000 batches. The extension frames the v2
batches, checks their CRC-32C (the CPU's instruction, three batches at a time)
and writes their lines straight to standard output, with the GIL released.

It only writes what it can vouch for, and stops at the first entry it cannot
(legacy entries, a bad CRC, a cut tail, an unusual control record): the Python
path (:mod:`auditor.dump._fast`) carries on from there and reports the
problem, so the output and the problems are what the Python path alone gives
(tests/test_dump_native.py). The keys and tokens of a line are handed in from
:mod:`auditor.dump._lines`, checked against the order the extension writes.

With ``--records``, :func:`write_records` writes the record lines of a data topic's segment the
same way: the extension walks each batch's records (lz4 decompressed by the ``lz4``
package's block decoder and gzip by the ``deflate`` package's libdeflate, both called from C; snappy
and zstd by :func:`auditor.formats.codecs.decompress`, called back) and writes their lines; a batch it cannot vouch for,
and every control batch (its markers), is decoded by :func:`one_batch` (the per-object decoder, for that batch only), and where it cannot frame an entry it stops and
:mod:`auditor.dump._fast` carries on.

For the internal topics' tables, :func:`data_records` hands the records of a segment's clean
batches back to Python (the extension frames them and checks their CRC; the table decoders read
the keys and values): ``dump --records`` of a KRaft metadata log (:mod:`auditor.dump._run`).

The extension is built by ``pip install`` where a C compiler is found (setup.py);
without it (or with ``TXN_AUDIT_NATIVE=0``), :func:`available` is False and
``dump`` takes the Python path.
"""

from __future__ import annotations

import os

from auditor.dump import _lines as dl

_NATIVE = None  # the module, once imported and checked; False: not usable
ENV = "TXN_AUDIT_NATIVE"  # "0": the Python path only (what the tests compare the compiled one with)


def _native():
    global _NATIVE
    if _NATIVE is None:
        if os.environ.get(ENV) == "0":
            _NATIVE = False
            return _NATIVE
        try:
            from auditor.dump import _dumpv2
        except ImportError:
            _NATIVE = False
        else:
            # the extension writes the fields in its own order: use it only if that is the lines' order
            _NATIVE = _dumpv2 if list(_dumpv2.FIELDS) == dl.BATCH_KEYS[:len(_dumpv2.FIELDS)] else False
    return _NATIVE


def available() -> bool:
    return bool(_native())


def applies(task: dict) -> bool:
    """A log segment, dumped whole (a KRaft snapshot starts with a control batch the extension leaves to Python)."""
    return task["kind"] == "segment" and not task.get("range_start") and task.get("range_end") in (None, -1) \
        and available()


def write_batches(task: dict, out_fd: int) -> int:
    """Write the batch lines of ``task``'s segment from its start to ``out_fd`` for as long as
    the extension can vouch for them; returns the position where the Python path must go on
    (``task["size"]`` when it wrote them all). An unreadable file returns 0: the Python path
    reports it."""
    from auditor.ingest.storage import open_regular

    native = _native()
    try:
        f = open_regular(task["path"])  # a FIFO or device put in its place is refused, not read
    except OSError:
        return 0
    with f:
        keys = tuple(dl.KEYS[k] for k in native.FIELDS)
        keys = (keys[0] + dl.TYPE, *keys[1:])  # the type key with its value
        size = int(task["size"])
        return native.dump(f.fileno(), 0, size, size, out_fd, keys, tuple(dl.CODEC_TOKENS), tuple(dl.TS_TOKENS[:2]),
                           tuple(dl.MARKER_TOKENS), dl.tail(task))


def write_records(task: dict, out_fd: int) -> int:
    """Write the record lines of ``task``'s segment (a data topic's: _run._records' objects)
    from its start to ``out_fd``, for as long as the extension can frame its entries; returns
    the position where the Python path must go on (``task["size"]`` when it wrote them all)."""
    from auditor.formats.codecs import decompress
    from auditor.ingest.storage import open_regular

    native = _native()
    try:
        f = open_regular(task["path"])
    except OSError:
        return 0
    with f:
        size = int(task["size"])
        keys = tuple(dl.RKEYS[k] for k in dl.RECORD_KEYS)
        keys = (keys[0] + dl.RECORD_TYPE, *keys[1:])  # the type key with its value
        where = dl.place(task)
        return native.records(f.fileno(), 0, size, size, out_fd, keys, dl.record_end(task), decompress,
                              lambda pos: one_batch(f, size, pos, where), _libraries)


def data_records(task: dict, chunk: int = 8192):
    """The records of ``task``'s segment (an internal topic's) as the extension reads them, from
    its start, in chunks of about ``chunk`` records: yields ``(position reached, batches)``, each
    batch ``(position, producer_id, producer_epoch, is_transactional, [(offset, timestamp, key,
    value), ...])`` as :func:`auditor.ingest.segments.iter_data_records` would give it (control
    batches left out). The last chunk's position is where the extension stopped: the file's size,
    or the first entry it could not vouch for (the Python decoders go on there). An unreadable
    file yields ``(0, [])``."""
    from auditor.ingest.storage import open_regular

    native = _native()
    try:
        f = open_regular(task["path"])
    except OSError:
        yield 0, []
        return
    with f:
        size = int(task["size"])
        pos = 0
        while True:
            reached, batches = native.data_records(f.fileno(), pos, size, size, chunk)
            yield reached, batches
            if not batches or reached >= size:
                return
            pos = reached


def one_batch(f, size: int, pos: int, where: dict) -> bytes:
    """The record lines of the batch at ``pos``, as the per-object path writes them
    (:func:`auditor.dump._lines.record_objects`: the records ``iter_records`` yields before it
    fails, if it does). The extension leaves every control batch here: its markers are lines of
    another shape, and there is one per transaction, not per record."""
    import json

    from auditor.formats.batch import BatchHeader, iter_segment

    h = next(iter_segment(f, start=pos, end=pos + 1, file_size=size, verify_crc=False), None)
    if not isinstance(h, BatchHeader) or (h.magic < 2 and h.record_count < 0):
        return b""
    return "".join(json.dumps(o) + "\n" for o in dl.record_objects(h, f, where)).encode()


def _libraries() -> "tuple[str | None, str | None]":
    """The files the extension's record walk takes its decoders from, each None when missing
    (that codec then goes through :func:`auditor.formats.codecs.decompress`):

    * the ``lz4`` package's block module, which holds LZ4_decompress_safe, the decoder
      :mod:`auditor.formats.codecs` uses;
    * the ``deflate`` package's module, its build of libdeflate (gzip; the extension leaves every
      payload libdeflate refuses to ``codecs._gzip``)."""
    files: list[str | None] = []
    for load in (_lz4_module, _deflate_module):
        try:
            files.append(getattr(load(), "__file__", None))
        except ImportError:
            files.append(None)
    return files[0], files[1]


def _lz4_module():
    from lz4.block import _block

    return _block


def _deflate_module():
    from deflate import _deflate

    return _deflate
