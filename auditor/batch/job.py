"""One run of the scheduled batch audit, in commit order.

1. Read the ledger and discover the inputs (a missing input, or one that lost
   every file, stops the run here, before anything is written).
2. ``runs``: this run's row, ``running`` (a killed previous run is resumed: same number).
3. Fingerprint every file and diff with the ledger: the change set.
4. Every table a changed or vanished file feeds: one keyed Delta overwrite each;
   then the ``files`` inventory rows of those files, keyed by path.
5. ``ledger``: rewritten as the state of the inputs this run has decoded.
6. The rules over the Delta tables (or, if nothing they depend on changed since
   the last finished run, that run's findings again); the findings MERGEd into ``findings``.
7. ``runs``: this run's row, ``finished``, with its figures.

A kill between any two commits (or inside one: a Delta commit is atomic, its
uncommitted data files are never read) leaves the ledger at the previous run's
state until step 5, so the next invocation recomputes the same change set and
redoes the same keyed overwrites; after step 5 it finds nothing to decode and
redoes the audit and the idempotent merge. Either way the warehouse ends up
as one clean run leaves it (see ``runs`` for the one table that remembers).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from auditor.batch import crash, history, runs
from auditor.batch.delta_rules import run_rules
from auditor.batch.decode import missing_tables, rows_of_files, write_files, write_tables
from auditor.batch.deltaio import (  # noqa: F401 - input_path: part of this module's interface
    input_path, is_delta, join, overwrite, read, require_delta, warehouse_uri)
from auditor.batch.ledger import IDENTITY, LEDGER_SCHEMA, diff, needs_rebuild
from auditor.batch.lock import warehouse_lock
from auditor.tables.versions import audit_digest, decoder_digest
from auditor.spark.local_rows import arrow_df
from auditor.engine.runner import select_rules
from auditor.engine.rule import discover
from auditor.engine.context import AuditOptions
from auditor.ingest.plan import DEFAULT_SPLIT_BYTES, make_plan

Progress = Callable[[str], None]


@dataclass
class BatchResult:
    run: int
    attempt: int
    warehouse: str
    seconds: float
    files_seen: int
    files_decoded: int
    files_gone: int
    rows_written: dict[str, int]
    findings_open: int
    findings_new: int
    findings_resolved: int
    fresh: bool
    audited: bool = True
    stage_seconds: dict[str, float] = field(default_factory=dict)
    bad_files: list[dict] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    clusters: list[str] = field(default_factory=list)  # every cluster the warehouse's files belong to (the ledger's)

    def summary(self) -> dict:
        return {
            "run": self.run, "attempt": self.attempt, "warehouse": self.warehouse, "seconds": round(self.seconds, 2),
            "files_seen": self.files_seen, "files_decoded": self.files_decoded, "files_gone": self.files_gone,
            "rows_written": sum(self.rows_written.values()), "table_rows_written": self.rows_written,
            "findings": {"open": self.findings_open, "new": self.findings_new, "resolved": self.findings_resolved},
            "rebuilt": self.fresh, "audited": self.audited, "bad_files": len(self.bad_files), "stage_seconds": self.stage_seconds,
        }


class InputError(ValueError):
    """An input that does not exist, or that lost every file it had (refused before any write)."""


def check_inputs(plan, previous: list[dict], roots: list[str], allow_empty: bool) -> None:
    """Refuse to run on a missing input, or on one that holds no files any more although
    files were decoded from it before: an unmounted volume would otherwise count as
    every one of its files deleted (rows removed, findings resolved)."""
    for root in roots:
        mine = [fi for fi in plan.files if fi.input_root == root]
        if any(fi.kind == "missing" for fi in mine):
            raise InputError(f"input {root} does not exist")
        unreadable = [fi for fi in mine if fi.kind == "unreadable-dir" and fi.path == root]
        if unreadable:  # e.g. a name node or an object store that cannot be reached
            raise InputError(f"input {root} cannot be read ({unreadable[0].note}); nothing was written")
        had = sum(1 for r in previous if r.get("input_root") == root)
        files = [fi for fi in mine if fi.kind not in ("empty-dir", "unreadable-dir", "symlink-loop")]
        if had and not files and not allow_empty:
            raise InputError(
                f"input {root} holds no files now, but {had} files were decoded from it before (an unmounted "
                f"volume?); nothing was written. Pass --allow-empty-input if they really are all gone")


def audit_key(rule_ids: list[str], options: AuditOptions, ledger: list[dict]) -> str:
    """A hash of everything the audit's result depends on: the rules and the engine
    they run on (ids, and the digest of the source of the ``rules`` package and of
    ``auditor.engine``: see ``versions``), the options, and the state of the
    decoded files (the tables are a function of it: every row comes from a file of
    the ledger at its fingerprint, decoded by the decoder the ledger names)."""
    import dataclasses
    import hashlib
    import json

    h = hashlib.sha1()
    h.update(json.dumps([sorted(rule_ids), dataclasses.asdict(options), audit_digest()], sort_keys=True,
                        default=str).encode())
    ident = ("path", *IDENTITY)
    for row in sorted(ledger, key=lambda r: r["path"]):
        h.update(json.dumps([row.get(k) for k in ident], default=str).encode())
    return h.hexdigest()


def paths(wh: str) -> dict[str, str]:
    return {"tables": join(wh, "tables"), "ledger": join(wh, "ledger"), "findings": join(wh, "findings"),
            "runs": join(wh, "runs")}


def run_batch(
    spark,
    inputs: list[str],
    warehouse: str,
    *,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    options: AuditOptions | None = None,
    only: list[str] | tuple[str, ...] = (),
    allow_empty_input: bool = False,
    progress: Progress | None = None,
) -> BatchResult:
    """One run over ``inputs`` into ``warehouse`` (see the module docstring), under
    the warehouse's lock (``lock``): raises ``WarehouseBusy`` if another run holds
    it, ``InputError`` for a missing or emptied input, ``DeltaUnavailable``
    without Delta; each before anything is written."""
    require_delta(spark)
    wh = warehouse_uri(warehouse)
    with warehouse_lock(wh):
        return _run(spark, inputs, wh, split_bytes=split_bytes, options=options, only=only,
                    allow_empty_input=allow_empty_input, progress=progress)


def _written_by_run(spark, wh: str, cs, dec, info) -> tuple[int, dict]:
    """(files decoded, rows written per table) by the run: this attempt's, or, when an earlier attempt
    of the run decoded files and committed the ledger before it was killed, the whole run's."""
    by_run = {e["path"] for e in cs.ledger if e["run"] == info.run}
    if info.resumed and not by_run <= cs.changed_paths:
        return len(by_run), rows_of_files(spark, wh, by_run)
    return len(cs.changed), dec.rows_written


def _audit(spark, p: dict, info, key: str, options: AuditOptions | None, only, say) -> tuple[list[dict], bool]:
    """The run's findings and whether the rules ran: the last finished run's findings when nothing the
    audit depends on changed since (same ``audit_key``: files, fingerprints, rules, options), else the
    rules' on the tables."""
    prev = runs.last_finished(info)
    if prev is not None and prev.get("audit_key") == key and is_delta(spark, p["findings"]):
        say(f"nothing the audit depends on changed since run {prev['run']}: its findings stand")
        return history.reported_in(spark, p["findings"], prev["run"]), False
    say("rules")
    return run_rules(spark, p["tables"], options, only).findings, True


def _run(spark, inputs: list[str], wh: str, *, split_bytes: int, options: AuditOptions | None,
         only: list[str] | tuple[str, ...], allow_empty_input: bool, progress: Progress | None) -> BatchResult:
    say = progress or (lambda _m: None)
    t_start = time.monotonic()
    p = paths(wh)
    roots = [input_path(i) for i in inputs]
    stage: dict[str, float] = {}

    def lap(name: str, t0: float) -> float:
        now = time.monotonic()
        stage[name] = round(now - t0, 3)
        return now

    t = time.monotonic()
    previous = [r.asDict() for r in read(spark, p["ledger"]).collect()] if is_delta(spark, p["ledger"]) else []
    t = lap("start", t)  # reading the ledger: the first Delta access of a fresh JVM pays Delta's start-up
    plan = make_plan(roots, split_bytes)
    check_inputs(plan, previous, roots, allow_empty_input)
    t = lap("plan", t)

    now_ms = int(time.time() * 1000)
    info = runs.begin(spark, p["runs"], roots, now_ms)
    say(f"run {info.run}" + (f" (resuming, attempt {info.attempt})" if info.resumed else ""))
    crash.point("after-begin")
    decoder = decoder_digest()
    missing = missing_tables(spark, wh) if previous else []
    upgraded = bool(previous) and needs_rebuild(previous, decoder)
    fresh = not previous or bool(missing) or upgraded
    t = lap("begin", t)
    cs = diff(plan, previous, roots, info.run, now_ms, fresh=fresh, decoder=decoder)
    why = ("" if not fresh else " (building every table: " + (
        "first run" if not previous else f"table {missing[0]} is missing" if missing
        else "the decoders changed since the files were decoded") + ")")
    say(f"{len(cs.changed)} of {len(cs.changed) + cs.unchanged} files to decode, {len(cs.gone)} gone{why}")
    t = lap("fingerprint", t)

    dec = write_tables(spark, wh, cs, lambda name, i, n: say(f"table {i + 1}/{n}: {name}"))
    t = lap("decode", t)
    write_files(spark, wh, cs, dec)
    t = lap("files", t)
    crash.point("before-ledger")

    if fresh or cs.changed or cs.gone:
        overwrite(arrow_df(spark, pa.Table.from_pylist(cs.ledger, schema=LEDGER_SCHEMA)), p["ledger"], new_schema=True)
    t = lap("ledger", t)
    crash.point("after-ledger")

    rule_ids = [r.id for r in select_rules(discover(), only)]
    key = audit_key(rule_ids, options or AuditOptions(), cs.ledger)
    findings, audited = _audit(spark, p, info, key, options, only, say)
    t = lap("audit", t)
    crash.point("before-merge")
    with crash.during("merge", spark):
        history.merge_findings(spark, p["findings"], findings, info.run, info.started_at_ms, rule_ids)
    counts = history.summary(spark, p["findings"], info.run)
    t = lap("merge", t)
    crash.point("after-merge")

    from auditor.ingest.inventory import CLEAN_STATUSES

    bad = [f for f in dec.inventory if f["status"] not in CLEAN_STATUSES]
    files_decoded, rows_written = _written_by_run(spark, wh, cs, dec, info)
    seconds = time.monotonic() - t_start
    runs.finish(spark, p["runs"], info, {
        "finished_at_ms": int(time.time() * 1000), "inputs": roots, "files_seen": len(cs.changed) + cs.unchanged,
        "files_decoded": files_decoded, "files_gone": len(cs.gone), "rows_written": sum(rows_written.values()),
        "table_rows_written": rows_written, "findings_open": counts["open"], "findings_new": counts["new"],
        "findings_resolved": counts["resolved"], "seconds": round(seconds, 3), "stage_seconds": stage,
        "audit_key": key, "audited": audited,
    })
    return BatchResult(
        run=info.run, attempt=info.attempt, warehouse=wh, seconds=seconds, files_seen=len(cs.changed) + cs.unchanged,
        files_decoded=files_decoded, files_gone=len(cs.gone), rows_written=rows_written,
        findings_open=counts["open"], findings_new=counts["new"], findings_resolved=counts["resolved"], fresh=fresh,
        stage_seconds=stage, bad_files=bad, findings=findings, audited=audited,
        clusters=sorted({e["cluster_id"] for e in cs.ledger if e.get("cluster_id")}),
    )
