"""The tables a scan keeps, and the findings kept beside them: where they are and when they are reused.

Why: ``scan`` keeps the tables it ingests, so that ``timeline`` and ``coordinator`` can read
them without a second ingest, and a second scan of unchanged inputs decodes nothing. By
default they are in ``$XDG_CACHE_HOME/txn-audit/tables/<digest>`` (:func:`tables_home`,
:func:`default_tables`), the digest (:func:`inputs_digest`) being one of the normalized
inputs, every file found under them (path, kind, size, mtime) and the decoding code. A scan whose
digest matches the tables already there (:data:`SCAN_STAMP`, :func:`kept`) reuses them
instead of decoding again. ``--tables DIR`` chooses the place (reused on the same terms),
``--no-keep-tables`` decodes into a temporary directory removed after the report. Only the
newest :data:`KEEP_SCANS` scans' tables stay under :func:`tables_home` (:func:`prune`).

The findings of an audit of kept tables are kept beside them (:data:`FINDINGS_CACHE`), by the
options that change verdicts (:func:`findings_key`): a later scan with the same inputs and
options renders them without Spark (:func:`cached_findings`). What the audit's queries
collected is kept too (:data:`COLLECTED`, by the rules run but not by ``--as-of`` or
``--max-timeout-ms``): a later scan with another reference instant or timeout decides the
verdicts and ages again from it, without Spark (:func:`collected_file`).

Files and JSON only: nothing here prints, starts Spark or imports the commands or the engine
(the audit's findings are written by a function the caller passes to :func:`keep_findings`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # pragma: no cover
    from auditor.ingest.plan import Plan

SCAN_STAMP = "_scan.json"  # in a scan's tables directory: the digest of the inputs it was decoded from
KEEP_SCANS = 10  # the newest scans' tables kept under tables_home()
FINDINGS_CACHE = "_findings"  # in a scan's kept tables: the findings of audits run on them, by options
KEEP_FINDINGS = 10  # the newest audits' findings kept there
COLLECTED = "_collected"  # in a scan's kept tables: what audits' queries collected, by rules (any --as-of)


def tables_home() -> Path:
    """Where ``scan`` keeps its tables by default: ``$TXN_AUDIT_TABLES_HOME``, else
    ``$XDG_CACHE_HOME/txn-audit/tables`` (``~/.cache/txn-audit/tables``)."""
    env = os.environ.get("TXN_AUDIT_TABLES_HOME")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "txn-audit" / "tables"


def default_tables(digest: str) -> Path:
    """Where ``scan`` keeps the tables of inputs of ``digest`` when not told (``--tables``), and
    so where ``timeline`` and ``coordinator`` given those inputs look for them."""
    return tables_home() / digest[:16]


def inputs_digest(logdirs: list[str], plan: Plan) -> str:
    """The identity of a scan's input: the normalized inputs, every file found under them (path,
    kind, size, mtime) and the decoding code. Equal digests: the same tables would be decoded."""
    from auditor.tables.versions import decoder_digest
    from auditor.ingest.storage import normalize

    key = {"inputs": sorted(normalize(i) for i in logdirs),
           "files": sorted((f.path, f.kind, f.size, f.mtime_ms) for f in plan.files),
           "decoder": decoder_digest()}
    return hashlib.sha256(json.dumps(key, default=str).encode()).hexdigest()


def kept(tdir: Path, digest: str) -> dict | None:
    """The stamp of the tables in ``tdir`` when they were decoded from inputs of ``digest``."""
    try:
        found = json.loads((tdir / SCAN_STAMP).read_text())
        # written for this very directory (a copy of kept tables elsewhere is decoded again)
        same = found.get("digest") == digest and found.get("tables") == str(tdir.absolute())
        return found if same and (tdir / "_ingest.json").is_file() else None
    except (OSError, ValueError, AttributeError):
        return None


def stamp(tdir: Path, digest: str, logdirs: list[str], run_id: str) -> None:
    """Mark the complete tables in ``tdir`` as decoded from inputs of ``digest`` by ingest run
    ``run_id``, for :func:`kept` to find next time."""
    try:
        (tdir / SCAN_STAMP).write_text(json.dumps({"digest": digest, "tables": str(tdir.absolute()),
                                                   "inputs": list(logdirs), "run_id": run_id}))
    except OSError:
        pass  # not reusable next time; the tables themselves are complete


def prune(home: Path, keep: Path | None, *, keep_newest: int = KEEP_SCANS) -> None:
    """Keep the newest ``keep_newest`` directories named by a digest under ``home`` (never ``keep``):
    the scans' tables under :func:`tables_home`, the findings under a scan's :data:`FINDINGS_CACHE`."""
    try:
        dirs = [d for d in home.iterdir() if d.is_dir() and re.fullmatch(r"[0-9a-f]{16}", d.name)]
        dirs.sort(key=lambda d: d.stat().st_mtime, reverse=True)
    except OSError:
        return
    for d in dirs[keep_newest:]:
        if d != keep:
            shutil.rmtree(d, ignore_errors=True)


def keep_scan(tdir: str, digest: str, logdirs: list[str], run_id: str) -> None:
    """The tables a scan just decoded into ``tdir`` kept for the next one (:func:`stamp`); when
    they are under :func:`tables_home`, the older scans' tables there beyond :data:`KEEP_SCANS`
    are removed (a ``--tables`` directory elsewhere leaves them alone)."""
    stamp(Path(tdir), digest, logdirs, run_id)
    if tdir.startswith(str(tables_home())):
        prune(tables_home(), Path(tdir))


def _audit_key(found: dict, rules: tuple[str, ...], **options) -> str:
    """Which audit a directory under :data:`FINDINGS_CACHE` or :data:`COLLECTED` holds: the
    tables' ingest run (``found``: :func:`kept`), the ``options`` its contents depend on, the rules
    run and the audit code (``audit_digest``)."""
    from auditor.tables.versions import audit_digest

    key = {"tables_run": found.get("run_id"), **options, "rules": sorted(rules), "audit": audit_digest()}
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]


def findings_key(kept: dict, as_of: int | None, max_timeout_ms: int, rules: tuple[str, ...]) -> str:
    """The findings' :func:`_audit_key`: with the options that change verdicts (``--as-of`` as
    given: ``now`` is a new instant each time, so it never matches)."""
    return _audit_key(kept, rules, as_of=as_of, max_timeout_ms=max_timeout_ms)


def cached_findings(tdir: Path, kept: dict | None, as_of: int | None, max_timeout_ms: int,
                    rules: tuple[str, ...]) -> Path | None:
    """The findings of an earlier scan of these very tables with these options: with every rule
    (``--rule`` and the other filters then only choose what is shown: the findings directory holds
    all of them) or with the same ``--rule`` set. None when there is none."""
    if kept is None:
        return None
    for run in ((), tuple(rules)):
        d = tdir / FINDINGS_CACHE / findings_key(kept, as_of, max_timeout_ms, run)
        if (d / "_audit.json").is_file():
            return d
    return None


def keep_findings(write: Callable[[str], None], tdir: Path, digest: str, as_of: int | None,
                  max_timeout_ms: int, rules: tuple[str, ...]) -> None:
    """An audit's findings kept beside the tables for the next scan (:func:`cached_findings`):
    ``write(directory)`` writes them (the engine's ``write_findings``: the caller's, so that
    ingest never imports the engine). Nothing is kept for tables that are not :func:`kept`."""
    found = kept(tdir, digest)
    if found is None:
        return
    try:
        write(str(tdir / FINDINGS_CACHE / findings_key(found, as_of, max_timeout_ms, rules)))
    except OSError:
        return  # not reusable next time; this scan's report is complete
    prune(tdir / FINDINGS_CACHE, None, keep_newest=KEEP_FINDINGS)  # --as-of now is a new key every time


def note_tables(findings: Path, tdir: Path) -> None:
    """The kept tables named in a findings directory's manifest, so ``report`` later prints
    ``txn-audit timeline TABLES`` with the real path (rewritten whole: temp file + rename)."""
    path = findings / "_audit.json"
    try:
        manifest = json.loads(path.read_text())
        manifest["tables"] = str(tdir.absolute())
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(manifest, indent=2, default=str))
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass  # the report prints <TABLES> instead of the path


def collected_file(tdir: Path, found: dict | None, rules: tuple[str, ...], *, existing: bool = True) -> Path | None:
    """Where the collected rows of an audit of the tables ``found`` (:func:`kept`) with ``rules``
    are kept (``COLLECTED/<key>/collected.json``); with ``existing``, only a file that is there:
    with every rule's (``--rule`` then picks) or the same ``--rule`` set's. None otherwise."""
    if found is None:
        return None
    for run in ((), tuple(rules)) if existing else (tuple(rules),):
        path = tdir / COLLECTED / _audit_key(found, run) / "collected.json"  # no option: none changes them
        if not existing or path.is_file():
            return path
    return None


def keep_collected(write: Callable[[Path], None], tdir: Path, digest: str, rules: tuple[str, ...]) -> None:
    """An audit's collected rows kept beside the tables (:func:`collected_file`): ``write(path)``
    writes them (the engine's ``Collected.save``). Nothing is kept for tables that are not :func:`kept`."""
    path = collected_file(tdir, kept(tdir, digest), rules, existing=False)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError:
        return  # not reusable next time; this scan's report is complete
    prune(tdir / COLLECTED, None, keep_newest=KEEP_FINDINGS)
