"""Reading the log dir of a broker that is running.

Operators point offline tools at live log dirs. Here a real Kafka 4.3.1 broker (one per module)
runs with its cleaner and retention busy: tiny segments rolled every 400 ms, a compacted topic
with a dirty ratio of 0.01 (the cleaner swaps ``.cleaned``/``.swap`` files in), a topic whose
retention deletes segments after a few seconds, a transactional producer (keyed writes, commits
and aborts) and an idempotent one; partway through, the broker is SIGKILLed and started again
(recovery, truncation of the active segments). Meanwhile ``dump``, ``scan`` and ``batch`` run
against its log dir over and over (dump in a process per run, scan and batch one after another in a process
of their own, with its own JVM, as users run them).

Asserted for every run: it ends with status 0 or 1 (never a signal: no SIGBUS; never 2: the input
is usable), no traceback; every file a scan found is in its ``files`` inventory, and a file that
changed under the reader is a row whose problem a moving log explains (vanished, cut short); a
finding is only of a kind a moving log can explain (a transaction in flight, a verdict the input
cannot settle, a producer whose early batches retention removed); nothing critical. After the
broker stops cleanly, a last scan finds nothing at warning or above.

Users also copy a running broker's log dir (``cp -a`` / ``rsync -a``, file by file while it writes) and
audit the copy later with ``--as-of`` the copy's time. Copies are taken here too, before the unclean kill
and after the restart (kept in ``$TXN_AUDIT_RB_COPIES``, default /tmp/rb-copies, with copies.json), and
each is audited in-process with its time and the broker's ``transaction.max.timeout.ms``: nothing
critical or error; an open transaction whose data partition was copied before its marker while the
copy's own ``__transaction_state`` holds its decision and Complete* is not reported at warning or above;
``stuck-lso`` agrees with ``hanging-transaction`` on every pinned transaction.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import PROJECT

from scripts.kafka.harness import NEWEST, KafkaBroker


SECONDS = float(os.environ.get("TXN_AUDIT_LIVE_SECONDS", "90"))  # how long the readers run
KILL_AT = 0.4  # the unclean restart, as a fraction of SECONDS

BROKER = {
    "log.cleaner.backoff.ms": 200,
    "log.retention.check.interval.ms": 500,
    "log.initial.task.delay.ms": 500,
    "log.segment.delete.delay.ms": 300,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
}
SMALL = {"internal.segment.bytes": "4096", "segment.ms": "400", "file.delete.delay.ms": "300"}
TOPICS = {
    "kv": {**SMALL, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "500",
           "min.compaction.lag.ms": "0"},
    "events": {**SMALL, "cleanup.policy": "delete", "retention.ms": "6000"},
}

# what a log that moves while it is read can show, by rule: open transactions whose markers the
# reader has not seen yet, verdicts it cannot settle, and what retention and the cleaner remove
EXPLAINED = {
    "hanging-transaction": {"in-flight", "undetermined"},
    "stuck-lso": {"open", "undetermined"},
    "unknown-producer-gap": {"retention", "undetermined", "earlier-segments-not-given"},
    # a snapshot written when a segment rolled after the partition was read (a warning that says so)
    "snapshot-log-mismatch": {"snapshot-ahead-of-log"},
}
# what a file changing under the reader is reported as
# what a file read while the broker writes, rolls, cleans or deletes can show; "trailing bytes": the active
# segment read mid-append, its last entry's header not all written yet (CI at 9a1045b: "[batches] 14 trailing
# bytes, too few for an entry header" on kv-0's active segment)
# "zero bytes after the last entry": a segment (active, or renamed .deleted) read while the broker had the
# file longer than the entries written in it (seen in 2 of 5 runs of this module, 76 s and 124 s after the
# unclean restart, on kv-0 and kv-1); a non-fatal row, the entries before it decoded
MOVING_FILE_PROBLEMS = ("No such file", "truncated", "cut off", "shrank", "vanished", "changed", "trailing bytes",
                        "zero bytes after the last entry")

# copies of the live log dir (cp -a / rsync -a while the broker writes), kept for a later re-scan: those of
# the last run, with copies.json (each copy's --as-of and the broker's transaction.max.timeout.ms)
COPIES = Path(os.environ.get("TXN_AUDIT_RB_COPIES", "/tmp/rb-copies"))
# the copies before the unclean kill: when (a fraction of SECONDS, before KILL_AT) and in which order
# (COPY_ORDERS); the copy after the restart takes the data first. Three data-first ones: a transaction is
# open on a data partition for ~15-50 ms of every ~70 ms cycle of the producers, and a data-first copy
# caught one whose marker landed before the coordinator's partition was copied in 4 of 11 tries (each copy
# costs ~10-15 s of audit on 2 busy cores)
COPY_AT = ((0.08, "readdir"), (0.16, "data-first"), (0.24, "data-first"), (0.32, "data-first"))
# the rules that judge an open transaction, and the coordinator's records that decide and end one
PINNING_RULES = ("hanging-transaction", "stuck-lso")
PREPARE = ("PrepareCommit", "PrepareAbort")
COMPLETE = ("CompleteCommit", "CompleteAbort")
LOUD = ("warning", "error", "critical")


class _Producers(threading.Thread):
    """A transactional producer (keyed records on both topics, every 5th transaction aborted) and
    an idempotent one, until stopped; through the unclean restart they retry, and a producer left
    fatal is replaced (a new one fences the old epoch)."""

    def __init__(self, bootstrap: str, log) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.log = bootstrap, log
        self.stop = threading.Event()
        self.commits = self.aborts = self.errors = 0
        self.ended = threading.Condition()  # notified whenever a transaction ended (commit or abort)

    def _txn_producer(self):
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "live-kv", "linger.ms": 5,
                      "transaction.timeout.ms": 10_000, "logger": self.log})
        p.init_transactions(60)
        return p

    def run(self) -> None:
        from confluent_kafka import Producer

        idem = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "logger": self.log})
        txp, n = None, 0
        while not self.stop.is_set():
            try:
                if txp is None:
                    txp = self._txn_producer()
                txp.begin_transaction()
                for i in range(6):
                    txp.produce("kv", key=b"k%d" % (i % 4), value=b"v%d" % n, partition=i % 2)
                    txp.produce("events", value=b"t%d" % n, partition=i % 2)
                    idem.produce("events", key=b"i", value=b"i%d" % n, partition=i % 2)
                idem.poll(0)
                n += 1
                if n % 5 == 0:
                    txp.abort_transaction(30)
                    self.aborts += 1
                    with self.ended:
                        self.ended.notify_all()
                else:
                    txp.commit_transaction(30)
                    self.commits += 1
                    with self.ended:
                        self.ended.notify_all()
            except Exception:  # noqa: BLE001 - the broker is down or restarting: start over
                self.errors += 1
                try:
                    if txp is not None:
                        txp.abort_transaction(10)
                except Exception:  # noqa: BLE001 - fatal or fenced: a new producer takes over
                    txp = None
                time.sleep(0.5)
            time.sleep(0.02)
        if txp is not None:
            try:
                txp.flush(10)
            except Exception:  # noqa: BLE001
                pass
        idem.flush(30)


def _dump(log_dir: Path) -> dict:
    """``dump`` (a process of its own, as users run it) of every segment there is right now."""
    files = sorted(str(p) for p in log_dir.glob("*/*.log"))
    proc = subprocess.run([sys.executable, "-m", "auditor.cli.main", "dump", *files], capture_output=True,
                          text=True, timeout=300, cwd=PROJECT)
    return {"cmd": "dump", "code": proc.returncode, "stderr": proc.stderr, "files": len(files)}


# scan and batch run in a process of their own (their own JVM, as users run them), one after the other
# until told to stop; then, once the broker is stopped, one last scan. Results go to runs.json.
_READERS = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import pyarrow.dataset as ds
    from cli_session import run_cli
    log_dir, work = sys.argv[1], Path(sys.argv[2])
    t0, runs, final = time.monotonic(), [], None

    def scan(out):
        r = run_cli(["scan", log_dir, "--tables", str(out / "tables"), "--out", str(out / "f"), "--format", "json",
                     "--quiet"])
        run = {"cmd": "scan", "code": r["code"], "stderr": r["stderr"], "traceback": r["traceback"]}
        if r["code"] in (0, 1):
            run["findings"] = json.loads(r["stdout"])["findings"]
            run["files"] = ds.dataset(str(out / "tables" / "files")).to_table().to_pylist()
        return run

    def save():
        (work / "runs.json").write_text(json.dumps({"runs": runs, "final": final}, default=str))

    i = 0
    while not (work / "stop-readers").exists():
        if i % 2 == 1:  # batch first: its session is the one with Delta Lake
            run = scan(work / f"run-{i}")
        else:
            r = run_cli(["batch", "--input", log_dir, "--warehouse", str(work / "warehouse"), "--quiet"])
            run = {"cmd": "batch", "code": r["code"], "stderr": r["stderr"], "traceback": r["traceback"]}
        run["at"] = round(time.monotonic() - t0, 1)
        runs.append(run)
        save()
        i += 1
    while not (work / "broker-stopped").exists():
        time.sleep(0.2)
    final = scan(work / "final")
    save()
""")


def _data_first(name: str) -> int:
    """The rank of a log dir's top-level entry in a "data-first" copy: the topics' partitions (0), then
    the other internal partitions (1: the metadata log, whose preallocated indexes make it the longest
    part of the copy), then ``__transaction_state`` (2), then the rest (3: checkpoints, meta.properties).
    A data partition copied before its transaction's marker lands, the coordinator's records a moment
    later already holding the decision and Complete*: what a copy of a running broker shows whenever
    its tool reaches the coordinator's partition last."""
    topic, _, partition = name.rpartition("-")
    if not topic or not partition.isdigit():
        return 3
    if topic == "__transaction_state":
        return 2
    return 1 if topic.startswith("__") else 0


# the order a copy takes the log dir's top-level entries in: "readdir" as they are listed (cp -a; on ext4 a
# hash order of the names: on the machine this was written on, __transaction_state-4, the coordinator's
# partition of "live-kv", came before the data partitions, so the data ran ahead of the coordinator)
COPY_ORDERS = {"readdir": lambda name: 0, "data-first": _data_first}


def _copy_log_dir(src: Path, dst: Path, order: str) -> dict:
    """``src`` copied to ``dst`` file by file while the broker writes, as ``cp -a`` / ``rsync -a`` users
    take it (``shutil.copytree``, symlinks kept; once per rank of ``COPY_ORDERS[order]``, over the
    top-level entries of that rank): each file is a prefix taken at its own moment. A file listed but
    gone before it was opened (a segment deleted by retention, a ``.cleaned``/``.swap`` file renamed) is
    skipped and recorded, as ``cp`` reports "No such file" and goes on; a file unlinked while open is
    copied whole (the open descriptor still reads it). ``as_of_ms``: the wall clock when the copy
    finished, the instant a user audits it at (``--as-of``)."""
    vanished: list[str] = []

    def copy(s: str, d: str) -> str:
        try:
            return shutil.copy2(s, d)
        except FileNotFoundError:
            vanished.append(os.path.relpath(s, src))
            return d

    started = time.time()
    rank = COPY_ORDERS[order]
    for r in sorted({rank(n) for n in os.listdir(src)}):
        def others(d: str, names: list[str], r: int = r) -> list[str]:
            return [n for n in names if rank(n) != r] if Path(d) == src else []

        try:
            shutil.copytree(src, dst, symlinks=True, copy_function=copy, ignore=others, dirs_exist_ok=True)
        except shutil.Error as e:  # what failed (a directory gone mid-copy): collected, raised at the end
            if any("No such file" not in str(why) for _s, _d, why in e.args[0]):
                raise
            vanished += [os.path.relpath(s, src) for s, _d, _why in e.args[0]]
    done = time.time()
    return {"path": str(dst), "order": order, "as_of_ms": int(done * 1000), "took_ms": int((done - started) * 1000),
            "vanished": vanished}


class _Copier(threading.Thread):
    """Copies of the broker's live log dir (:func:`_copy_log_dir`) while the producers run: at
    ``COPY_AT`` fractions of SECONDS (before the unclean kill, which waits for them: ``before_kill``),
    and once after the restart, when the restarted broker has ended a few transactions again. Each
    copy (``copies``) is a dict: name, phase (``before-kill`` / ``after-restart``), order, path,
    as_of_ms, took_ms, vanished. An exception ends the thread and is kept in ``error``, for a test to show."""

    def __init__(self, broker: KafkaBroker, producers: _Producers, restarted: threading.Event, t0: float) -> None:
        super().__init__(daemon=True)
        self.broker, self.producers, self.restarted, self.t0 = broker, producers, restarted, t0
        self.copies: list[dict] = []
        self.before_kill = threading.Event()
        self.error: BaseException | None = None

    def _take(self, phase: str, order: str) -> None:
        name = f"copy-{len(self.copies) + 1}"
        self.copies.append({"name": name, "phase": phase, **_copy_log_dir(self.broker.log_dir, COPIES / name, order)})

    def run(self) -> None:
        try:
            for at, order in COPY_AT:
                time.sleep(max(0.0, self.t0 + at * SECONDS - time.monotonic()))
                self._take("before-kill", order)
            self.before_kill.set()
            if not self.restarted.wait(6 * SECONDS):
                return
            p = self.producers  # the restarted broker in use again: transactions end after the restart
            ended = p.commits + p.aborts
            with p.ended:
                p.ended.wait_for(lambda: p.commits + p.aborts >= ended + 3, timeout=60)
            self._take("after-restart", "data-first")
        except BaseException as e:  # noqa: BLE001 - shown by test_copies_were_taken_while_the_producers_ran
            self.error = e
        finally:
            self.before_kill.set()


def _fresh_copies_dir() -> None:
    """``COPIES`` holds the copies of one run (the last): the previous run's copies and manifest go."""
    COPIES.mkdir(parents=True, exist_ok=True)
    for old in COPIES.glob("copy-*"):
        shutil.rmtree(old, ignore_errors=True)
    (COPIES / "copies.json").unlink(missing_ok=True)


def _broker_setting(broker: KafkaBroker, name: str, default: int) -> int:
    """A setting as the broker runs with it (its server.properties, overrides included), else Kafka's
    default: the copies are audited with the broker's own ``transaction.max.timeout.ms``."""
    for line in broker.properties_file.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == name:
            return int(value.strip())
    return default


def _save_manifest(copier: _Copier, max_timeout_ms: int) -> dict:
    """``COPIES/copies.json``: what a re-scan of the copies needs (each one's ``--as-of``, the broker's
    ``transaction.max.timeout.ms``); returned as the fixture's ``copies``."""
    manifest = {"transaction_max_timeout_ms": max_timeout_ms, "copies": list(copier.copies)}
    (COPIES / "copies.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def _main_phase(broker: KafkaBroker, producers: _Producers, work: Path, readers: subprocess.Popen,
                dumps: list[dict]) -> tuple[threading.Event, "_Copier", float]:
    """The readers' time on the moving log: ``dump`` over and over in this process, the unclean
    restart at ``KILL_AT`` of SECONDS, and the copies of the live log dir (:class:`_Copier`) -- until
    SECONDS have passed, the restart is done, every copy is taken and scan and batch ran at least twice
    each (at most 6 x SECONDS). The kill waits for the copies due before it: a copy taken half before
    and half after the kill would be neither a copy of the running broker nor of the restarted one.
    Returns the restart's event, the copier and the (monotonic) start."""
    t0 = time.monotonic()
    restarted = threading.Event()
    copier = _Copier(broker, producers, restarted, t0)

    def unclean_restart() -> None:  # while the readers read: no final snapshots or checkpoints
        time.sleep(KILL_AT * SECONDS)
        copier.before_kill.wait(2 * SECONDS)
        broker.kill()
        broker.start()
        restarted.set()

    chaos = threading.Thread(target=unclean_restart, daemon=True)
    chaos.start()
    copier.start()

    def reader_runs() -> list:
        try:
            return json.loads((work / "runs.json").read_text())["runs"]
        except (OSError, ValueError):
            return []

    while (time.monotonic() - t0 < SECONDS or not restarted.is_set() or len(reader_runs()) < 4
           or copier.is_alive()) and time.monotonic() - t0 < 6 * SECONDS and readers.poll() is None:
        run = _dump(broker.log_dir)
        run["at"] = round(time.monotonic() - t0, 1)
        dumps.append(run)
        time.sleep(1)
    (work / "stop-readers").touch()
    chaos.join()
    copier.join(60)
    return restarted, copier, t0


@pytest.fixture(scope="module")
def moving(tmp_path_factory):
    import logging

    from confluent_kafka.admin import AdminClient, NewTopic

    work = tmp_path_factory.mktemp("running-broker")
    log = logging.getLogger("running-broker-clients")
    log.propagate = False
    log.addHandler(logging.FileHandler(work / "clients.log"))
    broker = KafkaBroker(NEWEST, work / "broker", BROKER)
    dumps: list[dict] = []
    readers = None
    _fresh_copies_dir()
    try:
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": log})
        for f in admin.create_topics([NewTopic(t, 2, 1, config=c) for t, c in TOPICS.items()]).values():
            f.result(30)
        producers = _Producers(broker.bootstrap, log)
        producers.start()
        # the readers start on a log that already moves: wait until the producers ended a few
        # transactions (markers written) and every partition rolled a segment, not for a guessed delay

        def moving_already() -> bool:
            return producers.commits + producers.aborts >= 5 and all(
                len(list((broker.log_dir / f"{t}-{p}").glob("*.log"))) >= 2 for t in TOPICS for p in (0, 1))

        with producers.ended:  # checked again whenever a transaction ends
            producers.ended.wait_for(moving_already, timeout=60)
        assert moving_already(), (producers.commits, producers.aborts, producers.errors)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT), str(PROJECT / "tests")])}
        with open(work / "readers.err", "wb") as err:
            readers = subprocess.Popen([sys.executable, "-c", _READERS, str(broker.log_dir), str(work)], cwd=PROJECT,
                                       env=env, stdout=subprocess.DEVNULL, stderr=err)
        restarted, copier, t0 = _main_phase(broker, producers, work, readers, dumps)
        producers.stop.set()
        producers.join(60)
        alive_at_stop = broker.proc is not None and broker.proc.poll() is None
        broker.stop()
        (work / "broker-stopped").touch()
        readers.wait(timeout=600)
        got = json.loads((work / "runs.json").read_text())
        runs = dumps + got["runs"]
        copies = _save_manifest(copier, _broker_setting(broker, "transaction.max.timeout.ms", 900_000))
        print(f"\nrunning broker: {len(dumps)} dumps, {len(got['runs'])} scans/batches, {len(copies['copies'])} "
              f"copies over {time.monotonic() - t0:.0f} s, {producers.commits} commits, {producers.aborts} aborts, "
              f"{producers.errors} producer errors (restart); work in {work}, copies in {COPIES}")
        yield {"runs": runs, "final": got["final"], "producers": producers, "killed": restarted.is_set(),
               "alive_at_stop": alive_at_stop,
               "clean_shutdown_file": (broker.log_dir / ".kafka_cleanshutdown").exists(),
               "readers_code": readers.returncode, "readers_err": (work / "readers.err").read_text()[-3000:],
               "copies": copies, "copier_error": copier.error}
    finally:
        if readers is not None and readers.poll() is None:
            readers.kill()
        broker.kill()


def test_the_readers_process_ended_cleanly(moving):
    assert moving["readers_code"] == 0, moving["readers_err"]


def test_every_command_ran_repeatedly_and_the_producers_worked(moving):
    kinds = [r["cmd"] for r in moving["runs"]]
    assert moving["killed"]
    assert all(kinds.count(c) >= 2 for c in ("dump", "scan", "batch")), kinds
    assert moving["producers"].commits >= 10 and moving["producers"].aborts >= 2


def test_no_run_died_or_raised(moving):
    for r in [*moving["runs"], moving["final"]]:
        assert r["code"] in (0, 1), (r["cmd"], r["at"] if "at" in r else "final", r["code"], r["stderr"][-2000:])
        assert r.get("traceback") is None and "Traceback" not in r["stderr"], (r["cmd"], r["stderr"][-2000:])


def test_files_that_moved_are_inventory_rows_with_a_moving_log_reason(moving):
    scans = [r for r in moving["runs"] if r["cmd"] == "scan" and "files" in r]
    assert scans
    for r in scans:
        for f in r["files"]:
            assert f["path"] and f["status"], f
            if f["error_message"]:
                assert any(m in f["error_message"] for m in MOVING_FILE_PROBLEMS) or f["kind"] in (
                    "producer-snapshot", "offset-index", "time-index", "txn-index") or f["status"] == "out-of-range", f


def test_findings_while_it_moves_are_only_of_kinds_a_moving_log_explains(moving):
    for r in moving["runs"]:
        for f in r.get("findings", []):
            assert f["severity"] != "critical", (r["at"], f["rule"], f["kind"], f.get("message"))
            assert f["kind"] in EXPLAINED.get(f["rule"], set()), (r["at"], f["rule"], f["kind"], f.get("message"))


def test_the_restarted_broker_ran_until_its_clean_stop(moving):
    """The premise of the last scan: the broker restarted by the chaos thread was still running when
    it was stopped, and stopped cleanly (Kafka's LogManager writes ``.kafka_cleanshutdown``). A
    broker started from a thread used to die with that thread (PR_SET_PDEATHSIG), so the "clean stop"
    was a dead broker's log dir and the last scan rightly could not tell a pending marker from a
    hanging transaction."""
    assert moving["alive_at_stop"]
    assert moving["clean_shutdown_file"]


def test_after_a_clean_stop_nothing_at_warning_or_above(moving):
    final = moving["final"]
    assert final["code"] == 0, final["stderr"][-2000:]
    loud = [(f["rule"], f["kind"], f.get("message")) for f in final["findings"]
            if f["severity"] in ("warning", "error", "critical")]
    assert not loud, loud


# -- copies of the running broker, audited later with --as-of the copy's time --------------------------


def _coordinator_records(tables: Path) -> dict[str, list[dict]]:
    """The copy's ``__transaction_state`` records (its ``transaction_log`` table, read with pyarrow, not
    through the model under test) per transactional id, in log order."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    path = tables / "transaction_log"
    if not path.exists():
        return {}
    cols = ["partition", "offset", "transactional_id", "producer_id", "producer_epoch", "state", "topic_partitions",
            "last_update_timestamp_ms", "timestamp"]
    rows = ds.dataset(str(path)).to_table(columns=cols, filter=pc.field("record_type") == "transaction").to_pylist()
    by_id: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        by_id.setdefault(r["transactional_id"], []).append(r)
    return by_id


def _completion(records: dict[str, list[dict]], f: dict) -> str | None:
    """The copy's own record that completes the open transaction of finding ``f``, described, or None:
    a CompleteCommit/CompleteAbort of its producer id whose preceding Prepare* record of the same
    transactional id lists the partition with an epoch at or above the data's, and was written after
    the data's first batch. That last condition is why this is not just "a later Complete*": a
    transaction.version 1 producer (librdkafka) keeps its epoch across transactions, so the previous
    transaction's Prepare* lists the same partitions with the same epoch; it was written before the
    next transaction's data was produced (commit_transaction returns after it), the data's own after
    (linger.ms 5)."""
    tp = {"topic": f["topic"], "partition": f["partition"]}
    for tid, seq in records.items():
        prepare = None
        for r in seq:
            if r["state"] in PREPARE:
                prepare = r
            elif (r["state"] in COMPLETE and prepare is not None and r["producer_id"] == f["producer_id"]
                  and tp in (prepare["topic_partitions"] or []) and prepare["producer_epoch"] >= f["producer_epoch"]
                  and (prepare["last_update_timestamp_ms"] or prepare["timestamp"]) > f["first_timestamp"]):
                return (f"{tid}: {prepare['state']} epoch {prepare['producer_epoch']} at offset {prepare['offset']}, "
                        f"{r['state']} at offset {r['offset']} of __transaction_state-{r['partition']}")
    return None


def _hanging_kinds(findings: list[dict]) -> dict:
    """hanging-transaction findings of one copy by kind: in-flight, closed-after-the-copy, each
    undetermined one's reason, and any other kind counted (what the report to the rule's author
    gives, before and after the model change)."""
    out: dict = {"in-flight": 0, "closed-after-the-copy": 0, "undetermined": [], "other": {}}
    for f in findings:
        if f["rule"] != "hanging-transaction":
            continue
        if f["kind"] in ("in-flight", "closed-after-the-copy"):
            out[f["kind"]] += 1
        elif f["kind"] == "undetermined":
            out["undetermined"].append(f["evidence"].get("undetermined_reason"))
        else:
            out["other"][f["kind"]] = out["other"].get(f["kind"], 0) + 1
    return out


def _stuck_kinds(findings: list[dict]) -> dict[str, int]:
    """stuck-lso findings of one copy by kind (beside hanging-transaction's: the two must agree)."""
    out: dict[str, int] = {}
    for f in findings:
        if f["rule"] == "stuck-lso":
            out[f["kind"]] = out.get(f["kind"], 0) + 1
    return out


@pytest.fixture(scope="module")
def copy_audits(moving, spark, tmp_path_factory) -> list[dict]:
    """Each copy ingested and audited in-process on the shared Spark session, as a user audits a copy:
    ``as_of_ms`` the copy's time, the broker's own ``transaction.max.timeout.ms``. Per copy: its
    manifest entry, ``findings``, ``coordinator`` (:func:`_coordinator_records`), ``took_s``."""
    from auditor.engine.context import AuditOptions
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    root = tmp_path_factory.mktemp("copy-tables")
    max_timeout_ms = moving["copies"]["transaction_max_timeout_ms"]
    audits = []
    for c in moving["copies"]["copies"]:
        t0 = time.monotonic()
        tables = root / c["name"]
        ingest(spark, [c["path"]], str(tables))
        options = AuditOptions(as_of_ms=c["as_of_ms"], transaction_max_timeout_ms=max_timeout_ms)
        findings = audit(spark, str(tables), options=options).findings
        audits.append({**c, "findings": findings, "coordinator": _coordinator_records(tables),
                       "took_s": round(time.monotonic() - t0, 1)})
    for a in audits:
        completed = [f for f in a["findings"] if f["rule"] == "hanging-transaction"
                     and _completion(a["coordinator"], f) is not None]
        print(f"\n{a['name']} ({a['phase']}, {a['order']}, as of {a['as_of_ms']}, copied in {a['took_ms']} ms, "
              f"{len(a['vanished'])} files vanished mid-copy, scanned in {a['took_s']} s): hanging-transaction "
              f"{json.dumps(_hanging_kinds(a['findings']))}; stuck-lso {json.dumps(_stuck_kinds(a['findings']))}; "
              f"open transactions the copy's coordinator completed: {len(completed)}")
    return audits


def test_copies_were_taken_while_the_producers_ran(moving):
    """The premise of the copy tests: copies before the unclean kill and after the restart, each a log
    dir not cleanly stopped (no ``.kafka_cleanshutdown``: the broker was running) with the data and
    coordinator partitions in it."""
    assert moving["copier_error"] is None, repr(moving["copier_error"])
    copies = moving["copies"]["copies"]
    phases = [c["phase"] for c in copies]
    assert phases.count("before-kill") >= 3 and phases.count("after-restart") >= 1, phases
    for c in copies:
        path = Path(c["path"])
        assert not (path / ".kafka_cleanshutdown").exists(), c["name"]
        assert (path / "meta.properties").exists() and list(path.glob("__transaction_state-*")), c["name"]
        assert all((path / f"{t}-{p}").is_dir() for t in TOPICS for p in (0, 1)), c["name"]


@pytest.mark.spark
def test_a_copy_of_a_running_broker_has_nothing_critical_or_error(copy_audits):
    loud = [(a["name"], f["rule"], f["kind"], f["severity"], f.get("message")) for a in copy_audits
            for f in a["findings"] if f["severity"] in ("critical", "error")]
    assert not loud, loud


@pytest.mark.spark
def test_a_transaction_the_copys_coordinator_completed_is_not_reported_at_warning(copy_audits):
    """The data partition was copied before its marker landed, ``__transaction_state`` a moment later
    with the transaction decided and completed: the copy itself shows it closed after the copy. Not
    a warning (nor worse) of hanging-transaction or stuck-lso."""
    bad = []
    for a in copy_audits:
        for f in a["findings"]:
            if f["rule"] not in PINNING_RULES or f["severity"] not in LOUD:
                continue
            done = _completion(a["coordinator"], f)
            if done is not None:
                bad.append(f"{a['name']} ({a['phase']}): {f['rule']} {f['kind']} ({f['severity']}) on "
                           f"{f['topic']}-{f['partition']} from {f['first_offset']} (producer {f['producer_id']}/"
                           f"{f['producer_epoch']}), completed by {done}; reason: "
                           f"{f['evidence'].get('undetermined_reason')}")
    assert not bad, "\n".join(bad)


@pytest.mark.spark
def test_stuck_lso_agrees_with_hanging_transaction_on_every_copy(copy_audits):
    from partial_inputs import disagreements

    for a in copy_audits:
        assert disagreements(a["findings"]) == [], a["name"]


def _holed_copy(src: Path, dst: Path) -> list[tuple[str, int]]:
    """``src`` (a copy of the running broker) copied to ``dst`` with what a copy taken while the broker
    writes can lack between two segments, in each data topic of several segments: on partition 0 a
    middle segment's files are gone (deleted between the copy's listing and its read), on partition 1
    a middle segment's log ends halfway, after a whole batch (copied before the broker finished it).
    The partitions changed."""
    shutil.copytree(src, dst, symlinks=True)
    changed = []
    for topic in TOPICS:
        for partition in (0, 1):
            part = dst / f"{topic}-{partition}"
            logs = sorted(part.glob("*.log"))
            if len(logs) < 3:
                continue
            middle = logs[len(logs) // 2]
            if partition == 0:
                for f in part.glob(middle.stem + ".*"):
                    f.unlink()
            else:
                os.truncate(middle, _batch_boundary(middle, middle.stat().st_size // 2))
            changed.append((topic, partition))
    return changed


def _batch_boundary(segment: Path, at: int) -> int:
    """The first position at or after ``at`` where an entry of ``segment`` starts (each entry: an
    8-byte offset, a 4-byte size, then that many bytes), else the last entry's start: a copy taken
    before the broker finished the segment ends between two whole entries, as the broker appends
    each in one write, and lacks at least the segment's last entry."""
    size, pos, last = segment.stat().st_size, 0, 0
    with segment.open("rb") as f:
        while pos < at and pos < size:
            last = pos
            f.seek(pos + 8)
            pos += 12 + int.from_bytes(f.read(4), "big")
    return pos if pos < size else last


@pytest.fixture(scope="module")
def holed_audit(moving, spark, tmp_path_factory) -> dict:
    """The first data-first copy made holed (:func:`_holed_copy`), ingested and audited as the copies
    are: its ``changed`` partitions, ``findings``, and the replicas whose segments as read skip
    offsets (``offsets_missing_between`` of the model's partitions)."""
    from auditor.engine.context import AuditContext, AuditOptions
    from auditor.engine.runner import audit
    from auditor.forensics.timeline import ArrowTimeline, TimelineRequest
    from auditor.ingest.spark_job import ingest

    c = next(c for c in moving["copies"]["copies"] if c["order"] == "data-first")
    root = tmp_path_factory.mktemp("holed")
    changed = _holed_copy(Path(c["path"]), root / "copy")
    ingest(spark, [str(root / "copy")], str(root / "tables"))
    options = AuditOptions(as_of_ms=c["as_of_ms"],
                           transaction_max_timeout_ms=moving["copies"]["transaction_max_timeout_ms"])
    findings = audit(spark, str(root / "tables"), options=options).findings
    ctx = AuditContext(spark, str(root / "tables"))
    holed = {(r["topic"], r["partition"]) for r in ctx.partitions.where("offsets_missing_between > 0").collect()}
    ctx.close()
    gaps = {(t, p): [e for e in ArrowTimeline(root / "tables", TimelineRequest(t, p)).events() if e["event"] == "gap"]
            for t, p in changed}
    return {"changed": changed, "findings": findings, "holed": holed, "gaps": gaps}


@pytest.mark.spark
def test_a_copy_missing_or_cutting_a_middle_segment_has_nothing_critical_or_error(holed_audit):
    """A segment deleted while the copy ran, or one copied before the broker finished it, leaves
    offsets no segment of the copy holds: the model reads that as a gap in the input (a transaction
    open before it undetermined, no sequence gap or torn transaction across it), not as loss."""
    assert len(holed_audit["changed"]) >= 2, holed_audit["changed"]
    assert set(holed_audit["changed"]) <= holed_audit["holed"], holed_audit
    loud = [(f["rule"], f["kind"], f["severity"], f.get("message")) for f in holed_audit["findings"]
            if f["severity"] in ("critical", "error")]
    assert not loud, loud


@pytest.mark.spark
def test_the_timeline_shows_the_offsets_the_copy_lacks(holed_audit):
    """``timeline`` on a changed partition shows a row for the offsets no segment of the copy
    holds, where the replay passes them (one at least: files may also have vanished mid-copy)."""
    assert set(holed_audit["gaps"]) == set(holed_audit["changed"])
    for tp, gaps in holed_audit["gaps"].items():
        assert gaps, tp
        for g in gaps:
            assert g["missing_offsets"] == g["last_offset"] - g["offset"] + 1 > 0, (tp, g)
