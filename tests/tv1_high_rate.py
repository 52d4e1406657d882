"""Capture of a healthy transaction-version-1 consume-transform-produce app at a high rate on one
Kafka 4.3.1 broker, for ``tests/test_tv1_high_rate.py`` (issue 55, item 4: a real report).

The report: a read_committed CTP app (``sendOffsetsToTransaction``, many small transactions a second)
whose clients speak transaction version 1 (every client before 4.0), against one broker that is both the
transaction coordinator and every partition's leader; the auditor reported ``torn-transaction/
missing-commit-marker`` errors on markers Kafka's DumpLogSegments shows in the log, while the cluster
was exact end to end. Under transaction version 0/1 one producer epoch serves all of a session's
transactions, and on one broker the COMMIT marker, the coordinator's CompleteCommit and the id's next
transaction start (its first Ongoing record) can share a millisecond: time alone cannot tell which
transaction a marker closes.

Here: one KRaft node (broker+controller) of :data:`NEWEST`, formatted with ``--feature
transaction.version=1`` (checked on the live broker: ApiVersions v3 FinalizedFeatures); Kafka's own
Java clients of :data:`CLIENT` (3.5.2: they know nothing of transaction version 2) run
``scripts/kafka/java/CtpLoop.java``: a feeder writes ``ctp-in`` (3 partitions) at :data:`FEED_RATE`
records a second, and :data:`INSTANCES` CTP instances (one consumer group, transactional ids
``ctp-0``, ``ctp-1``) copy each poll to ``ctp-out`` (3 partitions) in one transaction with the
consumed offsets, for :data:`RUN_S` seconds. Then, on the live broker, what ``kafka-transactions.sh
find-hanging`` and an operator would check (:func:`check_live`): no transaction open at the
coordinator, LSO == HW on every partition of both topics, the group's committed input equal to what the
instances committed. The broker is stopped cleanly, its log dir copied, the copy scanned with default
options (:func:`scan`).

What the test rests on is checked and raised as :class:`CaptureError` (a fixture error, not an auditor
failure): the finalized transaction.version 1, the clients without transaction version 2, one producer
epoch for all of an id's transactions and every marker carrying its data's epoch (transaction version
2 would bump it at every EndTxn), every coordinator decision matched by one marker of its type on each
partition it lists, counted in log order (:func:`decisions`), and the committed output equal to the
committed input. Markers are read from the copied segments with kafka-python's record reader, the
coordinator's records from the copy's ``transaction_log`` table.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from marker_outage import CaptureError, wait_for
from marker_outage import control_batches as batches
from scripts.kafka.harness import NEWEST, KafkaBroker, RawConnection, _child_setup, classpath

#: the clients: Kafka's own Java clients before 4.0 speak transaction version 0/1 only
CLIENT = "3.5.2"
IN_TOPIC, OUT_TOPIC, GROUP = "ctp-in", "ctp-out", "ctp"
PARTITIONS = 3
#: CTP instances (transactional ids ctp-0, ctp-1), one consumer group
INSTANCES = 2
#: how long the CTP instances run (seconds) and how fast the feeder writes (records per second)
RUN_S = 80.0
FEED_RATE = 600
#: the least committed transactions for the run to count as high-rate (the report saw 8 false findings
#: in ~3 minutes of many small transactions a second)
MIN_COMMITS = 300
CTP_SOURCE = Path(__file__).resolve().parents[1] / "scripts" / "kafka" / "java" / "CtpLoop.java"

BROKER_OVERRIDES: dict[str, object] = {
    # one __transaction_state partition: every id's records in one partition, in one order
    "transaction.state.log.num.partitions": 1,
    "offsets.topic.num.partitions": 1,
}


@dataclass
class Capture:
    copy: Path | None = None
    finalized_features: dict[str, int] = field(default_factory=dict)
    ctp: list[dict] = field(default_factory=list)  # the CTP instances' "init" and "done" lines
    feeder: dict = field(default_factory=dict)
    live: dict = field(default_factory=dict)  # what the live broker said at the end
    seconds: dict[str, float] = field(default_factory=dict)
    # from the copy
    committed_decisions: int = 0  # CompleteCommit records of the CTP ids
    aborted_decisions: int = 0
    decision_span_ms: int = 0  # first PrepareCommit to last CompleteCommit
    epochs: dict[str, list[int]] = field(default_factory=dict)  # id -> distinct epochs of its markers
    client_transaction_versions: list = field(default_factory=list)  # as the coordinator's records have them
    same_ms: list[dict] = field(default_factory=list)  # decisions whose marker, Complete* and next start share a ms
    same_ms_out: int = 0  # of those, with the marker on the output topic (a partition the next transaction writes too)
    marker_complete_same_ms: int = 0
    committed_out: int = 0  # data records on ctp-out in committed transactions (the copy)
    findings: list[dict] = field(default_factory=list)
    table: list[dict] = field(default_factory=list)  # every decision (see decisions())

    @property
    def committed_by_clients(self) -> int:
        return sum(c["committed"] for c in self.ctp if c["event"] == "done")

    @property
    def committed_by_clients_records(self) -> int:
        return sum(c["records"] for c in self.ctp if c["event"] == "done")

    @property
    def tx_per_s(self) -> float:
        return self.committed_decisions / max(self.decision_span_ms / 1000, 1e-3)


# -- the broker -----------------------------------------------------------------------------------
def start_broker(workdir: Path) -> KafkaBroker:
    """One KRaft node of :data:`NEWEST` formatted with transaction.version 1; :class:`CaptureError`
    unless the live broker reports transaction.version finalized at 1."""
    broker = KafkaBroker(NEWEST, workdir, BROKER_OVERRIDES, features={"transaction.version": 1}, heap="384m")
    broker.start()
    return broker


def finalized_features(bootstrap: str) -> dict[str, int]:
    """name -> finalized max version level, from the broker's ApiVersions v3 answer (FinalizedFeatures)."""
    from kafka.protocol.metadata.api_versions import ApiVersionsRequest

    req = ApiVersionsRequest(client_software_name="txn-audit", client_software_version="1")
    with RawConnection(bootstrap, timeout=10) as conn:
        resp = conn.call(req, 3)
    if resp.error_code != 0:
        raise CaptureError(f"ApiVersions: error {resp.error_code}")
    return {f.name: f.max_version_level for f in resp.finalized_features or []}


def check_tv1(bootstrap: str) -> dict[str, int]:
    feats = wait_for("finalized features in ApiVersions", lambda: finalized_features(bootstrap), 30)
    if feats.get("transaction.version") != 1:
        raise CaptureError(f"the broker finalized transaction.version {feats.get('transaction.version')}, "
                           f"not 1: {feats}")
    return feats


def create_topics(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (IN_TOPIC, OUT_TOPIC)]).values():
        f.result(30)


# -- the app --------------------------------------------------------------------------------------
def run_ctp(bootstrap: str, work: Path, seconds: float | None = None) -> tuple[list[dict], dict]:
    """``CtpLoop.java`` on the :data:`CLIENT` jars for ``seconds``; its "init"/"done" lines and the feeder's."""
    seconds = RUN_S if seconds is None else seconds
    args = ["java", "-Xmx256m", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath(CLIENT), str(CTP_SOURCE),
            f"bootstrap={bootstrap}", f"input={IN_TOPIC}", f"output={OUT_TOPIC}", f"group={GROUP}",
            f"instances={INSTANCES}", f"seconds={seconds}", f"feed.rate={FEED_RATE}", f"feed.partitions={PARTITIONS}",
            "txn.prefix=ctp-", "max.poll.records=20"]
    out, err = work / "ctp.out", work / "ctp.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(args, stdout=o, stderr=e, stdin=subprocess.DEVNULL, preexec_fn=_child_setup())
        try:
            code = proc.wait(timeout=seconds + 120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
            raise CaptureError(f"CtpLoop did not end within {seconds + 120:.0f}s:\n{err.read_text()[-3000:]}")
    lines = [json.loads(ln) for ln in out.read_text().splitlines() if ln.startswith("{")]
    if code != 0:
        raise CaptureError(f"CtpLoop exited with {code}:\n{err.read_text()[-3000:]}")
    ctp = [ln for ln in lines if ln["event"] in ("init", "done")]
    feeder = next((ln for ln in lines if ln["event"] == "feeder"), {})
    done = [c for c in ctp if c["event"] == "done"]
    if len(done) != INSTANCES or any(c["fatal"] for c in done) or feeder.get("error"):
        raise CaptureError(f"the CTP app did not run through: {lines}\n{err.read_text()[-3000:]}")
    if any(c["tv2"] for c in ctp):
        raise CaptureError(f"a {CLIENT} client enabled transaction version 2: {ctp}")
    return ctp, feeder


# -- the live broker at the end -------------------------------------------------------------------
def coordinator_states(bootstrap: str) -> dict[str, str]:
    """transactional id -> state, of every id the coordinator has (ListTransactions, KIP-664)."""
    from kafka.protocol.admin.transactions import ListTransactionsRequest

    with RawConnection(bootstrap, timeout=10) as conn:
        resp = conn.call(ListTransactionsRequest(state_filters=[], producer_id_filters=[]), 0)
    if resp.error_code != 0:
        raise CaptureError(f"ListTransactions: error {resp.error_code}")
    return {t.transactional_id: t.transaction_state for t in resp.transaction_states}


def list_offsets(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (high watermark, last stable offset) from the live broker's ListOffsets."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    got: dict[int, list[int]] = {}
    for iso in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        req = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
        for tp, fut in admin.list_offsets(req, isolation_level=iso, request_timeout=10).items():
            got.setdefault(tp.partition, []).append(fut.result().offset)
    return {p: (v[0], v[1]) for p, v in sorted(got.items())}


def group_offsets(bootstrap: str) -> dict[int, int]:
    """partition of the input -> the group's committed offset."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(GROUP, [TopicPartition(IN_TOPIC, p) for p in range(PARTITIONS)])
    res = next(iter(admin.list_consumer_group_offsets([req], request_timeout=10).values())).result()
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def check_live(cap: Capture, bootstrap: str) -> None:
    """What ``kafka-transactions.sh find-hanging`` and an operator check, on the live broker once the app
    stopped: no transaction open at the coordinator, LSO == HW on every partition of both topics, and the
    group's committed input equal to what the instances committed (the app's own count)."""
    open_states = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
    states = wait_for("no transaction open at the coordinator", lambda: (lambda s: s if not any(
        v in open_states for v in s.values()) else None)(coordinator_states(bootstrap)), 30)
    offsets = {t: list_offsets(bootstrap, t) for t in (IN_TOPIC, OUT_TOPIC)}
    committed_in = group_offsets(bootstrap)
    cap.live = {"coordinator_states": states, "group_offsets": committed_in,
                "offsets": {t: {str(p): v for p, v in o.items()} for t, o in offsets.items()}}
    pinned = {(t, p): v for t, o in offsets.items() for p, v in o.items() if v[0] != v[1]}
    if pinned:
        raise CaptureError(f"LSO != HW on the live broker (hanging transactions): {pinned}")
    if sum(committed_in.values()) != cap.committed_by_clients_records:
        raise CaptureError(f"the group committed {sum(committed_in.values())} input records ({committed_in}), the "
                           f"instances {cap.committed_by_clients_records}: {cap.ctp}")


# -- the copy, read with kafka-python -------------------------------------------------------------
def read_coordinator(tables: Path, ids: list[str]) -> dict[str, list[dict]]:
    """The coordinator's records of ``ids`` from the copy's ``transaction_log`` table, in log order."""
    import pyarrow.parquet as pq

    rows = pq.read_table(str(tables / "transaction_log")).to_pylist()
    out: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        if r["transactional_id"] in ids and r.get("state"):
            out.setdefault(r["transactional_id"], []).append(r)
    return out


def decisions(cap: Capture, coord: dict[str, list[dict]]) -> None:
    """Every decision (Prepare* + Complete*) of the CTP ids with its markers, matched in log order: on each
    partition a decision lists, the producer's k-th marker is the k-th decision listing it (one broker, no
    coordinator move: one marker per decision and partition; checked). Fills ``cap.table``, the figures,
    and ``cap.same_ms``: decisions with a marker stamped in the millisecond the Complete* record was
    appended (its batch timestamp; its ``last_update_timestamp_ms`` is the Prepare*'s time, kept as
    ``complete_update_ms``) and the id's next transaction started (the next Ongoing record's
    ``start_timestamp_ms``). Raises :class:`CaptureError` where Kafka's own log does not pair up, or where
    the epochs are not transaction version 1's."""
    assert cap.copy is not None
    parts: dict[tuple[str, int], list[dict]] = {}

    def markers(topic: str, partition: int) -> list[dict]:
        if (topic, partition) not in parts:
            parts[(topic, partition)] = batches(cap.copy / f"{topic}-{partition}")
        return parts[(topic, partition)]

    used: dict[tuple[str, int, int], int] = {}  # (topic, partition, producer id) -> markers matched so far
    first_ms, last_ms = None, None
    for tid, recs in coord.items():
        prepare = None
        for i, r in enumerate(recs):
            if r["state"] in ("PrepareCommit", "PrepareAbort"):
                prepare = r
                continue
            if r["state"] not in ("CompleteCommit", "CompleteAbort"):
                continue
            if prepare is None:
                raise CaptureError(f"{tid}: {r['state']} at offset {r['offset']} without a Prepare* before it")
            want = "COMMIT" if r["state"] == "CompleteCommit" else "ABORT"
            nxt = next((n for n in recs[i + 1:] if n["state"] == "Ongoing"), None)
            row = {"transactional_id": tid, "producer_id": prepare["producer_id"], "epoch": prepare["producer_epoch"],
                   "decision": want, "prepare_offset": prepare["offset"], "complete_offset": r["offset"],
                   "prepare_ms": prepare["timestamp"], "complete_ms": r["timestamp"],
                   "complete_update_ms": r["last_update_timestamp_ms"], "start_ms": prepare["start_timestamp_ms"],
                   "next_start_ms": nxt["start_timestamp_ms"] if nxt else None,
                   "next_ongoing_offset": nxt["offset"] if nxt else None, "markers": []}
            for tp in prepare["topic_partitions"] or []:
                key = (tp["topic"], tp["partition"], prepare["producer_id"])
                mine = [b for b in markers(tp["topic"], tp["partition"])
                        if b["control"] and b["producer_id"] == prepare["producer_id"]]
                k = used.get(key, 0)
                if k >= len(mine) or mine[k]["control"] != want:
                    raise CaptureError(f"{tid}: decision {want} (Prepare at {prepare['offset']}) lists "
                                       f"{tp['topic']}-{tp['partition']}, whose marker #{k} of producer "
                                       f"{prepare['producer_id']} is {mine[k] if k < len(mine) else 'missing'}")
                used[key] = k + 1
                m = mine[k]
                if m["producer_epoch"] != prepare["producer_epoch"]:
                    raise CaptureError(f"{tid}: the marker at {tp['topic']}-{tp['partition']}@{m['offset']} has epoch "
                                       f"{m['producer_epoch']}, the decision {prepare['producer_epoch']}")
                row["markers"].append({"tp": f"{tp['topic']}-{tp['partition']}", "offset": m["offset"],
                                       "ms": m["timestamp"], "epoch": m["producer_epoch"]})
            cap.table.append(row)
            if want == "COMMIT":
                cap.committed_decisions += 1
            else:
                cap.aborted_decisions += 1
            first_ms = prepare["timestamp"] if first_ms is None else min(first_ms, prepare["timestamp"])
            last_ms = r["timestamp"] if last_ms is None else max(last_ms, r["timestamp"])
            prepare = None
        cap.client_transaction_versions = sorted({r.get("client_transaction_version") for rs in coord.values()
                                                  for r in rs}, key=str)
    cap.decision_span_ms = (last_ms or 0) - (first_ms or 0)
    # every marker of the CTP producers matched (none left over) and, on the output, every marker with the
    # epoch of the data before it (transaction version 2 would have the marker one epoch higher)
    pids = {row["producer_id"] for row in cap.table}
    for (topic, partition), bs in parts.items():
        for pid in pids:
            n = sum(1 for b in bs if b["control"] and b["producer_id"] == pid)
            if n != used.get((topic, partition, pid), 0):
                raise CaptureError(f"{topic}-{partition}: {n} markers of producer {pid}, "
                                   f"{used.get((topic, partition, pid), 0)} decisions list it")
    for p in range(PARTITIONS):
        bs = markers(OUT_TOPIC, p)
        data_epoch: dict[int, int] = {}
        pending: dict[int, int] = {}
        for b in bs:
            if b["control"] is None:
                data_epoch[b["producer_id"]] = b["producer_epoch"]
                pending[b["producer_id"]] = pending.get(b["producer_id"], 0) + b["records"]
                continue
            if b["producer_id"] in data_epoch and b["producer_epoch"] != data_epoch[b["producer_id"]]:
                raise CaptureError(f"{OUT_TOPIC}-{p}@{b['offset']}: marker epoch {b['producer_epoch']}, data epoch "
                                   f"{data_epoch[b['producer_id']]}: not transaction version 1")
            if b["control"] == "COMMIT":
                cap.committed_out += pending.get(b["producer_id"], 0)
            pending[b["producer_id"]] = 0
    for row in cap.table:
        cap.epochs.setdefault(row["transactional_id"], [])
        if row["epoch"] not in cap.epochs[row["transactional_id"]]:
            cap.epochs[row["transactional_id"]].append(row["epoch"])
    many = {t: e for t, e in cap.epochs.items() if len(e) > 1}
    if many:
        raise CaptureError(f"an id's transactions have several epochs (transaction version 2 bumps at every "
                           f"EndTxn): {many}")
    if cap.committed_out != cap.committed_by_clients_records:
        raise CaptureError(f"{OUT_TOPIC} holds {cap.committed_out} committed records, the instances committed "
                           f"{cap.committed_by_clients_records}")
    for row in cap.table:
        ms = {m["ms"] for m in row["markers"]}
        if row["complete_ms"] in ms:
            cap.marker_complete_same_ms += 1
            if row["next_start_ms"] == row["complete_ms"]:
                cap.same_ms.append(row)
                cap.same_ms_out += any(m["tp"].startswith(OUT_TOPIC + "-") and m["ms"] == row["complete_ms"]
                                       for m in row["markers"])


# -- the whole capture ----------------------------------------------------------------------------
def capture(work: Path) -> Capture:
    """Broker, app, live checks, clean stop, copy; the copy's markers and the coordinator's records are
    read by :func:`scan` (which needs the copy's tables)."""
    cap = Capture()
    t0 = time.monotonic()
    broker = start_broker(work / "broker")
    try:
        cap.finalized_features = check_tv1(broker.bootstrap)
        create_topics(broker.bootstrap)
        cap.seconds["broker"] = round(time.monotonic() - t0, 1)
        t1 = time.monotonic()
        cap.ctp, cap.feeder = run_ctp(broker.bootstrap, work)
        cap.seconds["app"] = round(time.monotonic() - t1, 1)
        check_live(cap, broker.bootstrap)
        t2 = time.monotonic()
        broker.stop()
        cap.seconds["stop"] = round(time.monotonic() - t2, 1)
    finally:
        broker.kill()
    cap.copy = work / "copy"
    shutil.copytree(broker.log_dir, cap.copy, symlinks=True)
    cap.seconds["capture"] = round(time.monotonic() - t0, 1)
    return cap


def scan(spark, cap: Capture, tables: Path) -> None:
    """``txn-audit scan`` of the copy with default options; then the decisions from its tables."""
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    assert cap.copy is not None
    t0 = time.monotonic()
    ingest(spark, [str(cap.copy)], str(tables))
    cap.findings = audit(spark, str(tables)).findings
    cap.seconds["scan"] = round(time.monotonic() - t0, 1)
    ids = sorted({c["transactional_id"] for c in cap.ctp})
    decisions(cap, read_coordinator(tables, ids))


def at_least_warning(findings: list[dict]) -> list[dict]:
    from auditor.engine.rule import severity_rank

    return [f for f in findings if severity_rank(f["severity"]) >= severity_rank("warning")]


def _decision_line(row: dict) -> str:
    return (f"{row['transactional_id']} {row['decision']} prepare@{row['prepare_offset']} ({row['prepare_ms']}) "
            f"complete@{row['complete_offset']} ({row['complete_ms']}; last update {row['complete_update_ms']}) "
            f"next Ongoing@{row['next_ongoing_offset']} (start {row['next_start_ms']}); markers "
            + ", ".join(f"{m['tp']}@{m['offset']} ({m['ms']})" for m in row["markers"]))


def explain(cap: Capture, f: dict) -> str:
    """A finding, and for a torn-transaction one the decision it names and the id's next one, as the copy
    has them: where the markers are and when the Prepare*, Complete* and next start were written."""
    lines = [f"{f['rule']}/{f['kind']} {f['severity']} {f.get('topic')}-{f.get('partition')} "
             f"first_offset={f.get('first_offset')} producer={f.get('producer_id')} id={f.get('transactional_id')}: "
             f"{f['message']}", f"    evidence: {json.dumps(f.get('evidence'), default=str)[:1500]}"]
    ev = f.get("evidence") or {}
    rows = [r for r in cap.table if r["transactional_id"] == f.get("transactional_id")]
    for i, row in enumerate(rows):
        if (row["prepare_offset"], row["complete_offset"]) == (ev.get("prepare_offset"), ev.get("complete_offset")):
            lines += [f"    decision: {_decision_line(row)}"]
            lines += [f"    next:     {_decision_line(r)}" for r in rows[i + 1:i + 2]]
    return "\n".join(lines)


def describe(cap: Capture) -> str:
    """The figures, the live broker's answers, a few same-millisecond triples and every finding of
    severity warning or above."""
    done = [(c["transactional_id"], c["producer_id"], c["producer_epoch"], c["committed"], c["aborted"], c["records"])
            for c in cap.ctp if c["event"] == "done"]
    lines = [f"tv1 high rate: features {cap.finalized_features}",
             f"  coordinator: {cap.committed_decisions} commits, {cap.aborted_decisions} aborts in "
             f"{cap.decision_span_ms / 1000:.1f} s = {cap.tx_per_s:.1f} tx/s; epochs {cap.epochs}; "
             f"client_transaction_version in its records {cap.client_transaction_versions}",
             f"  clients (id, producer, epoch, committed, aborted, records): {done}; feeder sent "
             f"{cap.feeder.get('sent')}; committed records on {OUT_TOPIC} in the copy {cap.committed_out}",
             f"  marker + Complete* in one ms: {cap.marker_complete_same_ms}; marker + Complete* + next start in one "
             f"ms: {len(cap.same_ms)} ({cap.same_ms_out} with the marker on {OUT_TOPIC})",
             f"  seconds {cap.seconds}; findings {len(cap.findings)}",
             f"  live: {cap.live}"]
    out = [r for r in cap.same_ms if any(m["tp"].startswith(OUT_TOPIC) and m["ms"] == r["complete_ms"]
                                         for m in r["markers"])]
    lines += [f"  same ms: {_decision_line(r)}" for r in out[:3]]
    lines += ["  " + explain(cap, f) for f in at_least_warning(cap.findings)]
    return "\n".join(lines)


def save(cap: Capture, path: Path) -> None:
    facts = asdict(cap)
    facts["copy"] = str(cap.copy)
    path.write_text(json.dumps(facts, indent=1, default=str))
