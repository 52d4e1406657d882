"""What ``txn-audit dump`` does (:func:`run`, the package's entry), without click: the
command line (:mod:`auditor.cli.dump_cmd`, and :func:`auditor.cli.main.main` for a plain
``dump [--records] FILE...``) calls it.

Segments and KRaft snapshots take a fast path (:mod:`auditor.dump._fast`):
the columnar header decoder (mmap + numpy) and JSON lines formatted
vectorised, byte for byte what the per-object path below writes
(``tests/test_dump_columnar.py``). This module imports neither pyarrow nor
rich nor click unless a problem is reported, a table is asked for or a file
needs the generic decoders.
"""

from __future__ import annotations

import json
import sys
from typing import Iterator

from auditor.dump._lines import MARKER_FIELDS, TABLE_FIELDS, place, place_literal
from auditor.dump._overlap import BackgroundWriter

# the internal topics whose records have tables of their own (auditor.ingest.tables: each TableSpec's
# topic; tests/test_dump_columnar.py holds the two lists equal): kept here so that a dump of other
# topics' segments never imports the table registry (pyarrow)
_INTERNAL = ("__transaction_state", "__consumer_offsets", "__cluster_metadata", "__share_group_state",
             "__remote_log_metadata")
# ``--format table``: column -> kafka-dump-log's name (the layout: auditor.dump._lines.table_lines)
_TABLE_COLUMNS = {key: name for name, key in TABLE_FIELDS + MARKER_FIELDS}


def _records(task: dict, controls_only: bool = False) -> Iterator[dict]:
    """Generic per-record objects, markers in their place (:func:`auditor.dump._lines.record_objects`);
    ``controls_only``: the control batches' alone (an internal topic's)."""
    from auditor.dump._lines import iter_record_objects
    from auditor.ingest.storage import open_regular

    try:
        f = open_regular(task["path"])
    except OSError:
        return  # the batch pass reports it
    with f:
        yield from iter_record_objects(f, task["size"], 0, place(task), controls_only)


def _table_objects(task: dict, name: str, spec) -> Iterator[dict]:
    """A table's rows of ``task`` as objects: its own columns after ``type``, without the context
    and problem columns (the file is said once, by the dump), or a problem object. A context column
    the decoder fills too is the table's ``log_<name>`` (:meth:`TableSpec.context_name`): that one
    goes, the record's own stays (a committed offset's topic and partition, a metadata record's
    broker id)."""
    _registry()
    from auditor.ingest.tables import iter_rows

    # deleted from a copy, not filtered key by key: a metadata row has ~35 columns
    drop = _dropped(spec)
    where = place(task, spec.context_name)  # at the end, after the columns (the fast paths' order)
    kind = "batch" if name == "batches" else name
    for row in iter_rows(spec, task):
        if row.get("_problem_kind"):
            yield {"type": "problem", "file": task["path"], "table": name, "kind": row["_problem_kind"],
                   "position": row["_problem_position"], "message": row["_problem_message"]}
            continue
        obj = {"type": kind}
        obj.update(row)
        for k in drop.intersection(row):
            del obj[k]
        obj.update(where)
        yield obj


def _dropped(spec) -> frozenset[str]:
    """The columns of ``spec``'s rows a dump line leaves out: the context (as the table names it:
    ``log_<name>`` where the decoder fills ``<name>`` too) and the problem columns. Made once per
    table (asked per table of every file: 1,486 files' ``--records``)."""
    got = _DROPPED.get(spec.name)
    if got is None:
        from auditor.ingest.context import CONTEXT_COLUMNS, PROBLEM_COLUMNS

        got = _DROPPED[spec.name] = frozenset({spec.context_name(c.name) for c in CONTEXT_COLUMNS}
                                              | {c.name for c in PROBLEM_COLUMNS})
    return got


_DROPPED: dict[str, frozenset[str]] = {}  # table name -> _dropped(its spec)


def _registry() -> dict:
    """The table registry (:data:`auditor.ingest.tables.TABLES`), imported without pandas: the
    registry's first list-to-Arrow conversion would import it (~0.16 s) for nothing here."""
    from auditor.perf.no_pandas import skip_pandas

    skip_pandas()
    from auditor.ingest.tables import TABLES

    return TABLES


def _objects(task: dict, with_records: bool, generic: bool = True) -> Iterator[dict]:
    """The per-object path: every object of a file as a dict (the reference the fast path is tested against).
    ``generic``: with the record objects of :func:`_records` (``--format table`` asks for those itself)."""
    TABLES = _registry()

    for name, spec in TABLES.items():
        if not spec.accepts(task):
            continue
        if name != "batches" and task["kind"] == "segment" and not with_records:
            continue  # internal-topic record decoders only with --records
        yield from _table_objects(task, name, spec)
    if generic and with_records and task["kind"] in ("segment", "kraft-snapshot"):
        yield from _records(task, controls_only=task.get("topic") in _INTERNAL)


def _fast_items(task: dict, with_records: bool, out) -> Iterator[dict]:
    """The fast path for segments and KRaft snapshots: lines go straight to
    ``out``; problems (and objects of the internal-topic tables) are yielded.
    A segment's batches go through the compiled path first (:mod:`auditor.dump._native`),
    as far as it can vouch for them; the vectorised one (:mod:`auditor.dump._fast`,
    numpy) writes the rest and reports the problems."""
    from auditor.dump import _native

    start = 0
    fd = _descriptor(out)
    native = fd is not None and _native.applies(task)
    if native:
        out.flush()  # what is queued goes out first: the extension writes to the descriptor itself
        start = _native.write_batches(task, fd)
    if start < task["size"] or task["kind"] != "segment" or (with_records and not native):
        _import_numpy_single_threaded()
        from auditor.dump import _fast

        if start < task["size"]:
            yield from _fast.write_batches({**task, "range_start": start} if start else task, out)
    # the internal topics' record decoders (only with --records): other topics' segments have no
    # table but batches, so their dump needs neither the table registry nor pyarrow (~0.2 s to import)
    if native and with_records and task.get("topic") in _INTERNAL:
        yield from _internal_lines(task, out)
    elif task["kind"] != "segment" or (with_records and task.get("topic") in _INTERNAL):
        yield from _internal_objects(task)
    if with_records and task.get("topic") in _INTERNAL:
        _import_numpy_single_threaded()
        from auditor.dump import _fast

        yield from _fast.control_records(task)
    if with_records and task.get("topic") not in _INTERNAL:
        start = 0
        if native:
            out.flush()
            start = _native.write_records(task, fd)
        if start < task["size"]:
            _import_numpy_single_threaded()
            from auditor.dump import _fast

            _fast.write_records({**task, "range_start": start} if start else task, out)


def _internal_objects(task: dict, start: int = 0, grants_before: "list[dict]" = ()) -> Iterator[dict]:
    """The objects of a file's tables other than ``batches``, in the registry's order, as
    :func:`_objects` gives them, with one decode of a ``__cluster_metadata`` file for its two
    tables: ``producer_id_blocks``' items are derived from ``metadata_records``' as its own
    decoder derives them (:func:`auditor.ingest.tables.pid_blocks_of`), then replayed, an
    exception that ended the decode included. Decoding the log twice was most of a ``--records``
    dump of a metadata log.

    ``start``: the entries from this position only (:func:`_record_lines` wrote the lines of
    those before it), ``grants_before`` the metadata items of producer-id grants it met there."""
    from dataclasses import replace

    from auditor.ingest.problems import Problem
    TABLES = _registry()
    from auditor.ingest.tables import pid_blocks_of

    if start:
        task = {**task, "range_start": start}
    specs = {name: spec for name, spec in TABLES.items() if name != "batches" and spec.accepts(task)}
    meta, grants = specs.get("metadata_records"), specs.get("producer_id_blocks")
    if meta is not None and grants is not None:
        seen: "list | None" = None
        ended: list[BaseException] = []

        def metadata(t: dict, f) -> Iterator:
            nonlocal seen
            seen = []
            try:
                for item in meta.decode(t, f):
                    if isinstance(item, Problem) or item.get("api_key") == 15:  # what grants keep
                        seen.append(item if isinstance(item, Problem) else dict(item))
                    yield item
            except Exception as exc:  # noqa: BLE001 - replayed below, then raised as the decoder raised it
                ended.append(exc)
                raise

        def derived(t: dict, f) -> Iterator:
            yield from pid_blocks_of(grants_before)
            if seen is None:  # the metadata decode never ran (the file could not be opened then)
                yield from grants.decode(t, f)
                return
            yield from pid_blocks_of(seen)
            if ended:
                raise ended[0]

        specs["metadata_records"] = replace(meta, decode=metadata)
        specs["producer_id_blocks"] = replace(grants, decode=derived)
    for name, spec in specs.items():
        yield from _table_objects(task, name, spec)


# a record's own fields in its row, after its table's columns (auditor.ingest.segments.record_context)
# a record line after its decoded part: the record's fields (f-string in _record_lines), then its batch's
_BATCH_FIELDS = ', "batch_position": {}, "batch_producer_id": {}, "batch_producer_epoch": {}, "batch_is_transactional": {}'
_RECORD_KEYS = frozenset(("type", "offset", "timestamp", "batch_position", "batch_producer_id",
                          "batch_producer_epoch", "batch_is_transactional"))
_LINE_MEMO_BYTES = 64  # key + value: the controller's NoOpRecord is a 4-byte value (decode_metadata_value's memo)
_LINE_MEMO_ENTRIES = 4096


def _internal_lines(task: dict, out) -> Iterator[dict]:
    """An internal topic's segment (``--records``): its tables, in the registry's order, as
    :func:`_internal_objects` gives them, each table's lines written to ``out`` by
    :func:`_record_lines` as far as it can, the per-object path going on from there.
    ``producer_id_blocks`` comes from ``metadata_records``' pass (its grants)."""
    TABLES = _registry()

    specs = [(name, spec) for name, spec in TABLES.items() if name != "batches" and spec.accepts(task)]
    if task["kind"] != "segment" or not all(spec.record_decoder or name == "producer_id_blocks" for name, spec in specs):
        yield from _internal_objects(task)
        return
    for name, spec in specs:
        if name == "producer_id_blocks":
            continue  # with metadata_records, below
        if name == "metadata_records":
            grants: list[dict] = []
            start = _record_lines(task, name, spec, out, lambda row: row.get("api_key") == 15, grants)
            yield from _internal_objects(task, start, grants)
            continue
        start = _record_lines(task, name, spec, out)
        if start < task["size"]:
            yield from _table_objects({**task, "range_start": start}, name, spec)


def _record_lines(task: dict, name: str, spec, out, keep=None, kept: "list[dict] | None" = None) -> int:
    """Write the lines of table ``name`` (an internal topic's records) of ``task``'s segment to
    ``out``, from its start for as long as the extension frames its batches
    (:func:`auditor.dump._native.data_records`: the CRC checked, records read as
    ``iter_data_records`` reads them); returns where the per-object path must go on (the
    file's size when it wrote them all).

    A line is the row object :func:`_table_objects` would encode: the record's row from the
    table's decoder, then the record's own fields, then the table's extra columns. Most of a
    controller's metadata log is one 4-byte ``NoOpRecord`` after another (97,668 of the 102,539
    metadata records of the real captures), so the decoded part of a small record's line is
    made once. A batch holding a record that does not decode (a ``bad-record`` problem) or whose
    columns would not keep that order stops it there. ``keep``: rows whose whole item (as the
    per-object decoder yields it) is appended to ``kept`` (the grants ``producer_id_blocks`` is
    made of)."""
    from auditor.dump import _native
    from auditor.errors import DecodeError
    decode = spec.record_decoder()
    extra = spec.record_extra(task) if spec.record_extra else {}
    tail = ((", " + _ENCODER.encode(extra)[1:-1] if extra else "")
            + place_literal(task, spec.context_name).decode("ascii") + "}\n")
    # a decoded column by one of these names would not stay where the prefix puts it (_table_objects)
    avoid = _RECORD_KEYS | set(extra) | _dropped(spec)
    memo: dict[tuple, tuple] = {}
    start = 0
    for reached, batches in _native.data_records(task):
        lines: list[str] = []
        start = reached
        for position, producer_id, epoch, transactional, recs in batches:
            # the batch's part of each line, once per batch (a line per record: ~10^5 in a metadata log)
            after = _BATCH_FIELDS.format(position, producer_id, epoch, "true" if transactional else "false") + tail
            batch: list[str] = []
            found: list[dict] = []
            for offset, timestamp, key, value in recs:
                memo_key = (key, value)
                hit = memo.get(memo_key)
                if hit is None:
                    try:
                        row = decode(key, value)
                    except DecodeError:  # a bad-record problem: the per-object path reports it
                        batch = None
                        break
                    if row is not None and not avoid.isdisjoint(row):
                        batch = None
                        break
                    hit = (None, None) if row is None else (
                        _ENCODER.encode({"type": name, **row})[:-1], row if keep is not None and keep(row) else None)
                    if len(key or b"") + len(value or b"") <= _LINE_MEMO_BYTES and len(memo) < _LINE_MEMO_ENTRIES:
                        memo[memo_key] = hit
                prefix, whole = hit
                if prefix is None:
                    continue
                batch.append(f'{prefix}, "offset": {offset}, "timestamp": {timestamp}{after}')
                if whole is not None:
                    found.append({**whole, "offset": offset, "timestamp": timestamp, "batch_position": position,
                                  "batch_producer_id": producer_id, "batch_producer_epoch": epoch,
                                  "batch_is_transactional": transactional, **extra})
            if batch is None:
                start = position
                break
            lines += batch
            if kept is not None:
                kept += found
        if lines:
            out.write("".join(lines).encode())
        if start < reached:
            break
    return start


def _descriptor(out) -> "int | None":
    """The file descriptor behind ``out``, or None (an in-memory buffer)."""
    try:
        return out.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both of the last two
        return None


def _problem(obj: dict, note: bool = False) -> None:
    from auditor.report.console import err, safe

    colour = "dim" if note else "red"
    err.print(f"[{colour}]{safe(obj['kind'])}[/{colour}] {safe(obj['file'])} at byte {obj['position']}: {safe(obj['message'])}")


def _is_normal(obj: dict, task: dict) -> bool:
    """An index's preallocated zeros: how the broker leaves the active segment's ``.index`` /
    ``.timeindex`` while it runs or after a crash, and Kafka 4.4.0 the metadata log's after a clean
    stop too (``AbstractIndex.close()`` no longer trims; only ``LogManager`` trims partition logs,
    through ``UnifiedLog.prepareActiveSegmentForClose()``). Said on stderr, not a problem (exit 0)."""
    return obj["kind"] == "zero-tail" and task["kind"] in ("offset-index", "time-index")


def run(files: "list[str] | tuple[str, ...]", fmt: str = "jsonl", records: bool = False,
        own_process: bool = False) -> None:
    """The ``dump`` command: writes to stdout, problems to stderr; exits (status 1 if any problem;
    an index's preallocated zero tail is said but is not one).

    ``own_process``: the process does nothing but this dump (``txn-audit dump``), so what loading
    allocates is set aside from the garbage collector (:func:`_load`), and many small files may be
    dumped by two processes (:mod:`auditor.dump._split`); not in a process that goes on (tests),
    whose cycles made before would never be collected."""
    _load(own_process)
    from auditor.ingest.plan import make_plan
    from auditor.perf.memory import keep_freed_memory

    keep_freed_memory()
    plan = make_plan(list(files), split_bytes=1 << 62)
    table = None
    if fmt == "table":
        from auditor.report.console import wide

        table = wide()
    by_path = {t["path"]: t for t in plan.tasks}
    files_here = plan.files
    second = None
    if own_process and table is None:
        from auditor.dump import _split

        at = _split.split_at(plan.files, by_path, records, _INTERNAL)
        if at is not None:  # the files from ``at`` on are dumped by a forked process, at the same time
            if records and any(t.get("topic") in _INTERNAL for t in plan.tasks):
                _registry()  # imported once, before the fork, not once in each process
            second = _split.fork(lambda say: _dump_files(plan.files[at:], by_path, records, None, say))
            files_here = plan.files[:at]
    try:
        bad = _dump_files(files_here, by_path, records, table, _say)
    except BaseException:
        if second is not None:
            second.kill()
        raise
    if second is not None:
        bad = second.finish(_say) or bad
    code = 1 if bad else 0
    if own_process:
        _end_process(code)
    sys.exit(code)


def _end_process(code: int) -> None:
    """End a process that did nothing but this dump without the interpreter's teardown: what is
    left to do at exit is freeing what was loaded (pyarrow, numpy, the registry), ~0.03 s of a
    ~0.6 s dump of many small files. Standard output and error are flushed first (a
    closed pipe raises here, as at a normal exit); nothing else in such a process waits for exit
    (no atexit handler, no open output file: the writer threads are joined, the second half's
    temporary files closed)."""
    import os

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _say(what: str, *args) -> None:
    """Print a message on stderr: ``("problem", obj, note)``, ``("skipped", path, why)`` or
    ``("failed", why)``."""
    if what == "problem":
        _problem(*args)
        return
    from auditor.report.console import err, safe

    if what == "failed":
        err.print(f"[red]failed[/red] {safe(args[0])}")
        return
    path, why = args
    err.print(f"[yellow]skipped[/yellow] {safe(path)}: {safe(why)}")


def _dump_files(files, by_path: dict, records: bool, table, say) -> bool:
    """Dump ``files`` (the plan's, in order) to stdout, messages through ``say`` (:func:`_say`);
    True when a file had a problem or was skipped."""
    bad = False
    sys.stdout.flush()
    # written by a thread: the next chunk is decoded and formatted while this one is copied out
    out = BackgroundWriter(sys.stdout.buffer)
    try:
        for fi in files:
            task = by_path.get(fi.path)
            if task is None:
                bad = True
                out.flush()
                say("skipped", fi.path, fi.note or "not a Kafka file this tool decodes")
                continue
            fast = table is None and task["kind"] in ("segment", "kraft-snapshot")
            if not fast:
                _import_numpy_single_threaded()
            batches: list[dict] = []
            decoded: dict[int, list[dict]] = {}  # --format table --records: internal tables' rows by offset
            # a file read by several decoders (a KRaft snapshot: batches, metadata records and
            # producer-id blocks) meets the same damage in each: say it once
            said: set[tuple] = set()
            for obj in (_fast_items(task, records, out) if fast else _objects(task, records, table is None)):
                if obj["type"] == "problem":
                    normal = _is_normal(obj, task)
                    bad = bad or not normal
                    key = (obj["kind"], obj["position"], obj["message"])
                    if key not in said:
                        said.add(key)
                        out.flush()
                        say("problem", obj, normal)
                    continue
                if table is not None:
                    if obj["type"] == "batch":
                        batches.append(obj)
                    elif isinstance(obj.get("offset"), int):
                        decoded.setdefault(obj["offset"], []).append(obj)
                else:
                    out.write((_ENCODER.encode(obj) + "\n").encode())
            if table is not None:
                from auditor.report.console import safe

                recs = list(_records(task)) if records and task["kind"] in ("segment", "kraft-snapshot") else None
                _print_table(table, fi.path, batches, safe, recs, decoded)
    finally:
        out.close()
    return bad


def _print_table(console, path: str, batches: list[dict], safe, recs: "list[dict] | None" = None,
                 decoded: "dict[int, list[dict]] | None" = None) -> None:
    """``dump --format table`` of one file: its path once, as kafka-dump-log heads it, then its
    batches (:func:`auditor.dump._lines.table_rows`), each followed with ``--records`` (``recs``:
    :func:`_records`' objects, in file order) by its records' ``| offset: ...`` lines
    (:func:`auditor.dump._lines.record_line`), as the tool's deep iteration prints them;
    ``decoded``: an internal topic's table rows, by offset."""
    from rich.text import Text

    from auditor.dump._lines import record_line, table_rows

    def say(line: str) -> None:
        console.print(Text(safe(line, markup=False)), soft_wrap=True)

    console.print(Text(f"Dumping {safe(path, markup=False)}", style="bold"), soft_wrap=True)
    recs, decoded, i = recs or [], decoded or {}, 0
    for batch, lines in zip(batches, table_rows(batches, console.width, lambda v: safe(v, markup=False))):
        for line in lines:
            console.print(Text(line), soft_wrap=True)
        # the records of this batch: those that follow in file order and name it (a batch without any, a
        # legacy wrapper that does not inflate, takes none)
        while i < len(recs) and recs[i]["batch_base_offset"] == batch["base_offset"]:
            say(record_line(recs[i], batch, decoded.get(recs[i]["offset"], [])))
            i += 1
    if not batches:
        console.print(Text("(no batches)", style="dim"), soft_wrap=True)


def _load(set_aside: bool) -> None:
    """Import what a dump of segments needs: the compiled path, or without it numpy and the
    vectorised decoders.

    With ``set_aside``: loading (numpy's import above all) allocates a few hundred thousand
    objects and frees few, and the collector would walk them over and over (~3% of a 1 GiB
    dump) to find no cycle. It is off while they load, and what was loaded is then frozen
    (``gc.freeze``) before it is on again for the dump."""
    import gc

    if set_aside:
        gc.disable()
    try:
        import auditor.ingest.plan  # noqa: F401
        from auditor.dump import _native

        if not _native.available():
            _import_numpy_single_threaded()
            import auditor.dump._fast  # noqa: F401
    finally:
        if set_aside:
            gc.freeze()
            gc.enable()


def _import_numpy_single_threaded() -> None:
    """Import numpy with its BLAS thread pool at one thread (unless the user set it).

    Loading OpenBLAS starts a thread per core, which costs ~0.1 CPU-s of start-up;
    ``dump`` does no linear algebra. The variables are restored afterwards (OpenBLAS
    reads them once, when loaded), so nothing else in the process sees them.
    """
    if "numpy" in sys.modules:
        return
    import os

    names = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    unset = [k for k in names if k not in os.environ]
    for k in unset:
        os.environ[k] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        for k in unset:
            os.environ.pop(k, None)


def _json_default(v):
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return str(v)


# what ``json.dumps(obj, default=_json_default)`` builds on every call, built once
_ENCODER = json.JSONEncoder(default=_json_default)
