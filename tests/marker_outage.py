"""Capture of a transaction marker outage on a real Kafka 4.3.1 cluster, for
``tests/test_marker_outage.py``.

Why a capture and not a synthetic log: what a coordinator writes when a marker cannot be
delivered (a PrepareCommit that stays, or a CompleteCommit written without the marker) and what the
data partitions hold then are Kafka's behaviour, not ours to imagine. Here three KRaft nodes (each
broker+controller, so the quorum survives one frozen node) run; a transaction of Kafka's own Java
producer (transaction version 2) covers ``orders-0`` and ``orders-1``, the node leading ``orders-1``
(``frozen``: neither the transaction coordinator nor, where there is a choice, the active
controller) is stopped with SIGSTOP, the producer commits, and the log dirs of all nodes are copied
during the outage as an operator's ``cp -a`` would (the brokers keep running). Two variants, one
cluster: :func:`capture_retrying` (the controllers never fence the frozen node, so the coordinator
keeps the transaction in PrepareCommit and retries the marker) and, after a restart of all nodes with
Kafka's default ``broker.session.timeout.ms``, :func:`capture_skipped` (the frozen node is fenced,
``orders-1`` has no leader, and the coordinator drops its marker and writes CompleteCommit).

What the capture relies on is checked as it goes and raised as :class:`CaptureError` (transaction
version 2 in use; who leads what; the frozen node's high-watermark checkpoint covering the open data;
every thread of the frozen JVM stopped before the commit is sent; the coordinator's state before and
after the copy; the COMMIT marker on ``orders-0`` and none on ``orders-1`` in the copy), so a capture
that went differently is never read as an auditor bug. The markers are read from the copied segments
with kafka-python's record reader, not with the auditor's decoders.

Timings on the 2-core machine: the cluster starts in ~10 s, the retrying variant takes ~30 s (the
PrepareCommit must age past :data:`MAX_TIMEOUT_MS`), the restart ~15 s and the skipped variant ~35 s
more (the coordinator gives up when the in-flight request times out, 30 s after the commit).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from scripts.kafka.harness import NEWEST, JavaProducer, KafkaCluster, RawConnection

TOPIC = "orders"
#: the cluster's transaction.max.timeout.ms, and the audit's --max-timeout-ms (small: the waits are short)
MAX_TIMEOUT_MS = 15_000
#: the client's transaction.timeout.ms, below the maximum (the coordinator refuses a larger one)
TXN_TIMEOUT_MS = 10_000
#: committed transactions over both partitions before the one the outage catches
PRE_COMMITS = 3
#: the controllers' broker.session.timeout.ms: never fence the frozen node (variant 1), Kafka's default (variant 2)
NEVER_FENCED_MS = 600_000
DEFAULT_SESSION_MS = 9_000
#: what TransactionMarkerChannelManager.addTxnMarkersToBrokerQueue (Kafka 4.3.1) logs when it drops markers
SKIP_LINE = "these partitions are likely deleted already and hence can be skipped"
#: how long the coordinator may take to skip the marker: the in-flight WriteTxnMarkers request to the
#: frozen node times out after request.timeout.ms (30 s) and only the retry finds no leader
SKIP_WAIT_S = 120.0
#: how long a thawed node may take to get the marker the coordinator kept retrying
LAND_WAIT_S = 90.0

CLUSTER_OVERRIDES: dict[str, object] = {
    "transaction.max.timeout.ms": MAX_TIMEOUT_MS,
    # one __transaction_state partition on one replica: one coordinator for every transactional id, and its
    # PrepareCommit is written without waiting for a follower (a frozen follower in its ISR would hold the
    # append until replica.lag.time.max.ms)
    "transaction.state.log.num.partitions": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    # orders has replication factor 1 (explicit assignment): no other replica can take over orders-1
    "default.replication.factor": 1,
    "min.insync.replicas": 1,
    "broker.session.timeout.ms": NEVER_FENCED_MS,
}


class CaptureError(RuntimeError):
    """The capture did not go as the scenario needs (a precondition of the audit, not the audit)."""


@dataclass
class Roles:
    """Which node does what: the coordinator (leader of ``__transaction_state-0``), the active controller
    (KRaft quorum leader), the node that leads ``orders-0`` and the one that leads ``orders-1`` and is frozen."""

    coordinator: int
    controller: int
    orders0: int
    frozen: int


@dataclass
class Capture:
    """One variant's copy and what the clients and the live cluster said about it (the ground truth)."""

    variant: str
    transactional_id: str
    roles: Roles
    copy: dict[int, Path] = field(default_factory=dict)  # node id -> copied log dir
    as_of_ms: int = 0  # wall clock when the copy was complete
    producer_id: int = -1
    data_epoch: int = -1  # the open transaction's data epoch
    tv2: bool = False
    open_offsets: dict[int, list[int]] = field(default_factory=dict)  # partition -> offsets the client got
    commit_returned_ms: int = 0
    coordinator_state: str = ""  # DescribeTransactions just before and after the copy
    orders1_leader_at_copy: int | None = None  # as the coordinator's metadata had it
    marker_orders0: dict = field(default_factory=dict)  # the COMMIT marker on orders-0 in the copy
    commits_before_on_orders1: int = 0  # this producer's COMMIT markers on orders-1 before the open data
    hw_checkpoint_orders1: int | None = None  # orders-1's high watermark in the copy's replication-offset-checkpoint
    copy_vanished: list[str] = field(default_factory=list)  # files gone between listing and copying
    skip_line: str | None = None  # variant 2: the coordinator's log line
    landed: dict | None = None  # the marker on the live orders-1 after the thaw
    offsets_after_thaw: tuple[int, int] | None = None  # orders-1's (high watermark, LSO) once the marker landed
    seconds: dict[str, float] = field(default_factory=dict)
    findings: list[dict] = field(default_factory=list)
    # the same copy handed over as on-call engineers do (:data:`PARTS`): part name -> its findings
    parts: dict[str, list[dict]] = field(default_factory=dict)

    @property
    def first_offset(self) -> int:
        """Where the open transaction starts on orders-1."""
        return min(self.open_offsets[1])


# -- the cluster ----------------------------------------------------------------------------------
def start_cluster(workdir: Path) -> KafkaCluster:
    """Three nodes with :data:`CLUSTER_OVERRIDES`, small heaps (2 cores: three JVMs, then Spark)."""
    cluster = KafkaCluster(NEWEST, workdir, 3, CLUSTER_OVERRIDES, heap="256m")
    cluster.start()
    return cluster


def restart_all(cluster: KafkaCluster, overrides: dict[str, object]) -> None:
    """Clean stop of all nodes together, ``overrides`` applied to each, all started again (what
    ``KafkaCluster.restart_node`` does for one node; the controllers read broker.session.timeout.ms at
    start, and whichever becomes the active one must have the new value)."""
    cluster.stop()
    for i, node in cluster.nodes.items():
        cluster.node_overrides.setdefault(i, {}).update(overrides)
        node.overrides.update(overrides)
    cluster.start()


def active_controller(cluster: KafkaCluster) -> int:
    """The KRaft quorum leader: ``leaderId`` of the newest epoch in the nodes' ``quorum-state`` files
    (each voter rewrites its file on every election; a node that missed one holds an older epoch)."""
    best = (-1, -1)
    for node in cluster.nodes.values():
        try:
            qs = json.loads((node.metadata_log_dir / "__cluster_metadata-0" / "quorum-state").read_text())
        except (OSError, ValueError):
            continue
        best = max(best, (int(qs.get("leaderEpoch", -1)), int(qs.get("leaderId", -1))))
    if best[1] < 0:
        raise CaptureError(f"no quorum-state names a controller leader in {list(cluster.log_dirs().values())}")
    return best[1]


def metadata_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> leader id (-1: none) as the node at ``bootstrap`` has them (a Metadata request to
    that node alone: an admin client might pick the frozen node and wait for it)."""
    from kafka.protocol.metadata import MetadataRequest

    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)
    with RawConnection(bootstrap, timeout=10) as conn:
        resp = conn.call(req, 9)
    t = resp.topics[0]
    if t.error_code != 0:
        raise CaptureError(f"metadata of {topic} from {bootstrap}: error {t.error_code}")
    return {p.partition_index: p.leader_id for p in t.partitions}


def wait_for(what: str, check: Callable[[], object], timeout: float, interval: float = 0.2) -> object:
    """Poll ``check`` until it returns something truthy; :class:`CaptureError` naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, ConnectionError, CaptureError) as e:  # a node still starting
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise CaptureError(f"{what}: not within {timeout:.0f}s (last: {last!r})")


def choose_roles(cluster: KafkaCluster) -> Roles:
    """Pick the node to freeze: not the coordinator (its PrepareCommit must be written and answered) and,
    where the other two allow, not the active controller (the quorum then has no election to hold)."""
    nodes = sorted(cluster.nodes)
    some = cluster.nodes[nodes[0]].bootstrap
    coordinator = wait_for("__transaction_state-0 has a leader",
                           # node ids start at 1: no leader (-1) becomes 0, which wait_for polls on
                           lambda: max(metadata_leaders(some, "__transaction_state").get(0, -1), 0), 30)
    controller = active_controller(cluster)
    candidates = [n for n in nodes if n != coordinator]
    frozen = next((n for n in candidates if n != controller), candidates[0])
    orders0 = next(n for n in nodes if n != frozen)
    return Roles(coordinator=coordinator, controller=controller, orders0=orders0, frozen=frozen)


def create_orders(cluster: KafkaCluster, roles: Roles) -> None:
    """``orders`` with replica assignment ``[[orders0], [frozen]]``; waits until both have their leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # librdkafka wants the partition count with an assignment (its -1 default means "the broker's default")
    topic = NewTopic(TOPIC, 2, replica_assignment=[[roles.orders0], [roles.frozen]])
    for f in admin.create_topics([topic]).values():
        f.result(30)
    want = {0: roles.orders0, 1: roles.frozen}
    wait_for(f"{TOPIC} led as assigned {want}",
             lambda: metadata_leaders(cluster.nodes[roles.coordinator].bootstrap, TOPIC) == want, 30)


def describe_state(cluster: KafkaCluster, roles: Roles, transactional_id: str) -> str:
    """The coordinator's state of ``transactional_id`` (DescribeTransactions, KIP-664)."""
    from kafka.protocol.admin.transactions import DescribeTransactionsRequest

    with RawConnection(cluster.nodes[roles.coordinator].bootstrap, timeout=10) as conn:
        resp = conn.call(DescribeTransactionsRequest(transactional_ids=[transactional_id]), 0)
    st = resp.transaction_states[0]
    if st.error_code != 0:
        raise CaptureError(f"DescribeTransactions {transactional_id}: error {st.error_code}")
    return st.transaction_state


# -- freezing a node ------------------------------------------------------------------------------
def thread_states(pid: int) -> set[str]:
    """The scheduler states of the process's threads (``/proc/<pid>/task/*/stat``; "T": stopped)."""
    states = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            states.add(task.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0].upper())
        except (OSError, IndexError):
            continue  # a thread that ended while listed
    return states


@contextmanager
def frozen(cluster: KafkaCluster, node_id: int) -> Iterator[Callable[[], None]]:
    """SIGSTOP the node's JVM (a long GC pause or a network partition: sockets stay open, nothing answers);
    yields ``thaw`` (SIGCONT); thawed on leaving in any case, so no frozen JVM outlives the capture."""
    proc = cluster.nodes[node_id].proc
    if proc is None or proc.poll() is not None:
        raise CaptureError(f"node {node_id} is not running")
    state = {"frozen": True}

    def thaw() -> None:
        if state["frozen"] and proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
        state["frozen"] = False

    os.kill(proc.pid, signal.SIGSTOP)
    try:
        # the stop reaches each thread when it next runs: a commit is a few ms on loopback, so wait for all
        wait_for(f"every thread of node {node_id} (pid {proc.pid}) stopped",
                 lambda: thread_states(proc.pid) <= {"T"}, 10, 0.005)
        yield thaw
    finally:
        thaw()


def copy_log_dirs(cluster: KafkaCluster, dest: Path) -> tuple[dict[int, Path], int, list[str]]:
    """``shutil.copytree`` of every node's log dir while the brokers run (an operator's ``cp -a``): files
    that vanish between listing and copying are left out, as cp reports and skips them; returns the
    copies, the wall clock in epoch ms once the copy is complete (the audit's as-of) and what vanished."""
    copies: dict[int, Path] = {}
    vanished: list[str] = []
    for i, log_dir in sorted(cluster.log_dirs().items()):
        target = dest / f"node-{i}"
        try:
            shutil.copytree(log_dir, target, symlinks=True)
        except shutil.Error as e:
            for src, _dst, why in e.args[0]:
                if "No such file" not in str(why):
                    raise CaptureError(f"copying {src}: {why}") from e
                vanished.append(str(src))
        copies[i] = target
    return copies, int(time.time() * 1000), vanished


# -- markers, read with kafka-python ----------------------------------------------------------------
def control_batches(part_dir: Path) -> list[dict]:
    """Every batch of the partition's segments, in offset order, as (offset, producer id, epoch, control
    type: COMMIT/ABORT/None for data, record count, max timestamp): kafka-python's reader, independent of
    the auditor's decoders."""
    from kafka.record import MemoryRecords

    out = []
    for seg in sorted(part_dir.glob("*.log")):
        records = MemoryRecords(seg.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            if batch is None:
                break
            kind = None
            if batch.is_control_batch:
                key = next(iter(batch)).key
                kind = {0: "ABORT", 1: "COMMIT"}.get(struct.unpack(">hh", key[:4])[1], "OTHER") if key else "OTHER"
            out.append({"offset": batch.base_offset, "producer_id": batch.producer_id,
                        "producer_epoch": batch.producer_epoch, "control": kind, "records": batch.records_count,
                        "timestamp": batch.max_timestamp, "transactional": batch.is_transactional})
    return out


def markers_after(part_dir: Path, producer_id: int, offset: int) -> list[dict]:
    """The producer's markers at or after ``offset`` in ``part_dir``."""
    return [b for b in control_batches(part_dir)
            if b["control"] and b["producer_id"] == producer_id and b["offset"] >= offset]


# -- the producer ---------------------------------------------------------------------------------
def start_producer(cluster: KafkaCluster, transactional_id: str, log_dir: Path) -> JavaProducer:
    """Kafka's own Java producer, initialised; :class:`CaptureError` unless it uses transaction version 2."""
    p = JavaProducer(NEWEST, {"bootstrap.servers": cluster.bootstrap, "client.id": transactional_id,
                              "transactional.id": transactional_id, "transaction.timeout.ms": TXN_TIMEOUT_MS,
                              "linger.ms": 5}, log_file=log_dir / f"{transactional_id}.java.log")
    st = p.call("init")
    if not st["tv2"]:
        p.close()
        raise CaptureError("the Java producer did not enable transaction version 2 (the scenario is TV2's)")
    return p


def write_both(p: JavaProducer, tag: str) -> dict[int, list[int]]:
    """One record to each partition of orders, flushed; partition -> offsets the client got."""
    p.call("begin")
    p.call("send", TOPIC, 0, f"{tag}-0")
    p.call("send", TOPIC, 1, f"{tag}-1")
    out: dict[int, list[int]] = {}
    for r in p.call("flush")["records"]:
        out.setdefault(r["partition"], []).append(r["offset"])
    return out


def open_transaction(cap: Capture, p: JavaProducer) -> None:
    """:data:`PRE_COMMITS` committed transactions over both partitions, then the one left open, flushed.
    In TV2 a write to a partition still waiting for the previous transaction's marker is retried by the
    client (CONCURRENT_TRANSACTIONS), so the flush returns once every earlier marker is written."""
    for i in range(PRE_COMMITS):
        write_both(p, f"{cap.variant}-c{i}")
        p.call("commit")
    cap.open_offsets = write_both(p, f"{cap.variant}-open")
    cap.producer_id, cap.data_epoch, cap.tv2 = p.state["producer_id"], p.state["producer_epoch"], p.state["tv2"]


def checkpointed_high_watermark(log_dir: Path, topic: str, partition: int) -> int | None:
    """The partition's entry in the log dir's ``replication-offset-checkpoint`` (None: no entry yet)."""
    try:
        lines = (log_dir / "replication-offset-checkpoint").read_text().splitlines()
    except OSError:
        return None
    for ln in lines[2:]:
        parts = ln.split()
        if len(parts) == 3 and parts[:2] == [topic, str(partition)]:
            return int(parts[2])
    return None


def await_hw_checkpoint(cluster: KafkaCluster, cap: Capture) -> None:
    """Wait until the node to be frozen has checkpointed orders-1's high watermark past the open data.
    The auditor reads the high watermark from ``replication-offset-checkpoint``, which a broker rewrites
    every replica.high.watermark.checkpoint.interval.ms (5 s): frozen right after the flush, the copy's
    checkpoint would or would not cover the open transaction by the phase of that timer (a stale one
    hides the pinned LSO from stuck-lso), so the capture fixes it: covered, as after any pause of a few
    seconds between the writes and the outage."""
    node = cluster.nodes[cap.roles.frozen]
    end = max(cap.open_offsets[1]) + 1
    wait_for(f"node {node.node_id}'s replication-offset-checkpoint covering {TOPIC}-1 up to {end}",
             lambda: (checkpointed_high_watermark(node.log_dir, TOPIC, 1) or -1) >= end, 20, 0.1)


# -- the outage -----------------------------------------------------------------------------------
def commit_during_outage(cluster: KafkaCluster, cap: Capture, p: JavaProducer) -> None:
    """``commitTransaction()`` with the frozen node leading orders-1: it must succeed, since the
    coordinator answers EndTxn once PrepareCommit is written and sends the markers afterwards."""
    called_ms = int(time.time() * 1000)
    st = p.call("commit", check=False)
    cap.commit_returned_ms = int(time.time() * 1000)
    if not st.get("ok"):
        raise CaptureError(f"commitTransaction failed during the outage: {st.get('error')} (the scenario needs the "
                           "client told success: the coordinator answers EndTxn after writing PrepareCommit)")
    state = describe_state(cluster, cap.roles, cap.transactional_id)
    if state != "PrepareCommit":
        live = cluster.nodes[cap.roles.frozen].log_dir / f"{TOPIC}-1"
        raise CaptureError(f"right after the commit the coordinator has {cap.transactional_id} {state}, not "
                           "PrepareCommit: the marker to the frozen node cannot have been written (commit called at "
                           f"{called_ms}, returned at {cap.commit_returned_ms}; frozen node's threads now "
                           f"{thread_states(cluster.nodes[cap.roles.frozen].proc.pid)}; its orders-1 markers since the "
                           f"open data: {markers_after(live, cap.producer_id, cap.first_offset)})")


def hold_prepare_commit(cluster: KafkaCluster, cap: Capture, extra_s: float = 5.0) -> None:
    """Wait until the PrepareCommit is older than transaction.max.timeout.ms (plus ``extra_s``), checking
    all along that the coordinator still has it PrepareCommit (it retries the marker: nothing to poll for
    but the clock, so the state is what is polled)."""
    until = cap.commit_returned_ms / 1000 + MAX_TIMEOUT_MS / 1000 + extra_s
    while time.time() < until:
        state = describe_state(cluster, cap.roles, cap.transactional_id)
        if state != "PrepareCommit":
            raise CaptureError(f"the coordinator left PrepareCommit ({state}) while the node leading orders-1 was "
                               "frozen and never fenced: the retrying variant did not happen")
        time.sleep(min(1.0, max(0.0, until - time.time())))


def copy_during_outage(cluster: KafkaCluster, cap: Capture, dest: Path, state: str, leader: int) -> None:
    """Copy every log dir while the node is frozen, checking before and after that the coordinator has the
    transaction in ``state`` and orders-1's leader is ``leader`` (the frozen node, or -1 once it is fenced),
    so the copy is of that moment."""
    coordinator = cluster.nodes[cap.roles.coordinator].bootstrap
    for when in ("before", "after"):
        got = describe_state(cluster, cap.roles, cap.transactional_id)
        if got != state:
            raise CaptureError(f"{when} the copy the coordinator has {cap.transactional_id} {got}, not {state}")
        cap.orders1_leader_at_copy = metadata_leaders(coordinator, TOPIC).get(1)
        if cap.orders1_leader_at_copy != leader:
            raise CaptureError(f"{when} the copy orders-1's leader is {cap.orders1_leader_at_copy}, not {leader}")
        if when == "before":
            t0 = time.monotonic()
            cap.copy, cap.as_of_ms, cap.copy_vanished = copy_log_dirs(cluster, dest)
            cap.seconds["copy"] = round(time.monotonic() - t0, 2)
    cap.coordinator_state = state


def check_copy(cap: Capture) -> None:
    """What the audit is about must be in the copy: the open transaction's data on orders-1 after this
    producer's earlier COMMIT markers and with no marker after it, and the COMMIT marker on orders-0 with the
    epoch bumped at EndTxn (TV2: ``TransactionMetadata.prepareAbortOrCommit``)."""
    o0 = cap.copy[cap.roles.orders0] / f"{TOPIC}-0"
    o1 = cap.copy[cap.roles.frozen] / f"{TOPIC}-1"
    m0 = markers_after(o0, cap.producer_id, max(cap.open_offsets[0]) + 1)
    if [m["control"] for m in m0] != ["COMMIT"]:
        raise CaptureError(f"the copy of orders-0 should end on one COMMIT marker of producer {cap.producer_id} "
                           f"after offset {max(cap.open_offsets[0])}, has {m0}")
    if m0[0]["producer_epoch"] != cap.data_epoch + 1:
        raise CaptureError(f"orders-0's marker has epoch {m0[0]['producer_epoch']}, not the data epoch "
                           f"{cap.data_epoch} + 1 that transaction version 2 bumps to at EndTxn")
    cap.marker_orders0 = m0[0]
    batches = control_batches(o1)
    if not any(b["offset"] == cap.first_offset and b["producer_id"] == cap.producer_id and not b["control"]
               for b in batches):
        raise CaptureError(f"the copy of orders-1 lacks the open transaction's data at offset {cap.first_offset}")
    late = markers_after(o1, cap.producer_id, cap.first_offset)
    if late:
        raise CaptureError(f"the copy of orders-1 has a marker after the open transaction's data: {late}")
    cap.hw_checkpoint_orders1 = checkpointed_high_watermark(cap.copy[cap.roles.frozen], TOPIC, 1)
    if (cap.hw_checkpoint_orders1 or -1) <= max(cap.open_offsets[1]):
        raise CaptureError(f"the copy's replication-offset-checkpoint has orders-1 at {cap.hw_checkpoint_orders1}, "
                           f"not past the open data at {max(cap.open_offsets[1])}")
    cap.commits_before_on_orders1 = sum(1 for b in batches if b["control"] == "COMMIT"
                                        and b["producer_id"] == cap.producer_id and b["offset"] < cap.first_offset)
    if cap.commits_before_on_orders1 < PRE_COMMITS:
        raise CaptureError(f"orders-1 has {cap.commits_before_on_orders1} COMMIT markers of producer "
                           f"{cap.producer_id} before the open transaction, not {PRE_COMMITS}")


def await_marker(cluster: KafkaCluster, cap: Capture) -> dict | None:
    """After the thaw: the marker the coordinator kept retrying, on the live orders-1 of the frozen node,
    and the coordinator's state once it had time to complete the transaction (None if no marker comes
    within :data:`LAND_WAIT_S`: recorded for the test, not raised)."""
    live = cluster.nodes[cap.roles.frozen].log_dir / f"{TOPIC}-1"
    t0 = time.monotonic()
    try:
        got = wait_for("the marker on orders-1 after the thaw",
                       lambda: markers_after(live, cap.producer_id, cap.first_offset), LAND_WAIT_S, 0.25)
    except CaptureError:
        return None
    landed = {**got[0], "seconds_after_thaw": round(time.monotonic() - t0, 1)}
    try:
        wait_for("CompleteCommit after the marker landed",
                 lambda: describe_state(cluster, cap.roles, cap.transactional_id) == "CompleteCommit", 30)
    except CaptureError:
        pass  # the state it stayed in is recorded: the test says what it expected
    landed["coordinator_state"] = describe_state(cluster, cap.roles, cap.transactional_id)
    return landed


def skip_logged(log: Path, start: int, transactional_id: str) -> str | None:
    """The coordinator's line dropping orders-1's marker for ``transactional_id``, in ``log`` past ``start``."""
    with open(log, "rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    return next((ln for ln in text.splitlines() if SKIP_LINE in ln and transactional_id in ln), None)


# -- the two variants -----------------------------------------------------------------------------
def capture_retrying(cluster: KafkaCluster, work: Path) -> Capture:
    """Variant 1 (controllers' broker.session.timeout.ms :data:`NEVER_FENCED_MS`): the frozen node stays
    orders-1's leader, so the coordinator keeps the transaction in PrepareCommit and retries the marker.
    Copied once the PrepareCommit is older than transaction.max.timeout.ms; then the node is thawed and
    the marker's arrival on orders-1 recorded (``landed``)."""
    t0 = time.monotonic()
    txn_id = "orders-retrying"
    p = start_producer(cluster, txn_id, work)  # its init creates __transaction_state: the coordinator exists
    try:
        roles = choose_roles(cluster)
        create_orders(cluster, roles)
        cap = Capture("retrying", txn_id, roles)
        open_transaction(cap, p)
        await_hw_checkpoint(cluster, cap)
        cap.seconds["setup"] = round(time.monotonic() - t0, 1)
        with frozen(cluster, roles.frozen) as thaw:
            commit_during_outage(cluster, cap, p)
            hold_prepare_commit(cluster, cap)
            copy_during_outage(cluster, cap, work / "copy-retrying", "PrepareCommit", roles.frozen)
            thaw()
            cap.landed = await_marker(cluster, cap)
    finally:
        p.close()
    check_copy(cap)
    cap.seconds["total"] = round(time.monotonic() - t0, 1)
    return cap


def roles_after_restart(cluster: KafkaCluster, before: Roles) -> Roles:
    """The roles once all nodes are back: the replicas are pinned (replication factor 1), so the coordinator
    and the leaders of orders are the nodes they were; the active controller may have moved."""
    coordinator = cluster.nodes[before.coordinator].bootstrap
    wait_for("__transaction_state-0 and orders led as before the restart",
             lambda: metadata_leaders(coordinator, "__transaction_state") == {0: before.coordinator}
             and metadata_leaders(coordinator, TOPIC) == {0: before.orders0, 1: before.frozen}, 60)
    return Roles(before.coordinator, active_controller(cluster), before.orders0, before.frozen)


def capture_skipped(cluster: KafkaCluster, before: Roles, work: Path) -> Capture:
    """Variant 2 (all nodes restarted with Kafka's default broker.session.timeout.ms): the controller
    fences the frozen node, orders-1 (one replica) has no leader, and when the in-flight WriteTxnMarkers
    request times out the coordinator's retry finds no leader endpoint (``KRaftMetadataCache
    .getPartitionLeaderEndpoint`` is empty for leader -1), drops orders-1's marker and writes
    CompleteCommit. Copied once the coordinator logged that and DescribeTransactions says CompleteCommit;
    the node is thawed only after the copy. The coordinator sends no more markers, but the thawed node may
    still serve the WriteTxnMarkers request it took before it froze (seen on 4.3.1: the COMMIT lands and the
    LSO moves): recorded as ``landed`` and ``offsets_after_thaw``, the live broker's ListOffsets."""
    t0 = time.monotonic()
    restart_all(cluster, {"broker.session.timeout.ms": DEFAULT_SESSION_MS})
    cap = Capture("skipped", "orders-skipped", roles_after_restart(cluster, before))
    cap.seconds["restart"] = round(time.monotonic() - t0, 1)
    p = start_producer(cluster, cap.transactional_id, work)
    try:
        open_transaction(cap, p)
        await_hw_checkpoint(cluster, cap)
        log = cluster.nodes[cap.roles.coordinator].out_file
        start = log.stat().st_size
        with frozen(cluster, cap.roles.frozen) as thaw:
            commit_during_outage(cluster, cap, p)
            t_commit = time.monotonic()
            cap.skip_line = wait_for(f"the coordinator's '{SKIP_LINE}' for {cap.transactional_id} in {log}",
                                     lambda: skip_logged(log, start, cap.transactional_id), SKIP_WAIT_S, 0.5)
            cap.seconds["skip_after_commit"] = round(time.monotonic() - t_commit, 1)
            wait_for("CompleteCommit after the skipped marker", lambda: describe_state(
                cluster, cap.roles, cap.transactional_id) == "CompleteCommit", 30)
            copy_during_outage(cluster, cap, work / "copy-skipped", "CompleteCommit", -1)
            thaw()
            cap.landed = await_marker(cluster, cap)
            if cap.landed is not None:
                cap.offsets_after_thaw = wait_for("orders-1's LSO past the open data", lambda: _lso_past(cluster, cap),
                                                  30)
    finally:
        p.close()
    check_copy(cap)
    cap.seconds["total"] = round(time.monotonic() - t0, 1)
    return cap


def _lso_past(cluster: KafkaCluster, cap: Capture) -> tuple[int, int] | None:
    """orders-1's (high watermark, last stable offset) from the live cluster's ListOffsets, once the LSO is
    past the open transaction's data (None before)."""
    from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    got = []
    for iso in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        r = admin.list_offsets({TopicPartition(TOPIC, 1): OffsetSpec.latest()}, isolation_level=iso,
                               request_timeout=10)
        try:
            got.append(next(iter(r.values())).result().offset)
        except KafkaException:  # the thawed node rejoining (FENCED_LEADER_EPOCH, NOT_LEADER...): asked again
            return None
    return (got[0], got[1]) if got[1] > max(cap.open_offsets[1]) else None


# -- the audit ------------------------------------------------------------------------------------
#: the copy handed over as on-call engineers do, scanned with the options they would give: the frozen
#: leader's log dir alone (the broker an SRE grabs first), aged 20 minutes with --as-of as the undetermined
#: verdict's own hint says; the whole copy with default options (no --as-of, no --max-timeout-ms)
PARTS = {"frozen-alone-20m": (True, 20 * 60_000), "whole-defaults": (False, None)}


def scan_part(spark, cap: Capture, part: str, out: Path) -> list[dict]:
    """One of :data:`PARTS` of the copy, scanned with Kafka's default transaction.max.timeout.ms."""
    from auditor.engine.context import AuditOptions
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    alone, aged_ms = PARTS[part]
    dirs = [cap.copy[cap.roles.frozen]] if alone else list(cap.copy.values())
    ingest(spark, [str(d) for d in dirs], str(out))
    opts = AuditOptions(as_of_ms=None if aged_ms is None else cap.as_of_ms + aged_ms)
    cap.parts[part] = audit(spark, str(out), options=opts).findings
    return cap.parts[part]


def scan(spark, cap: Capture, out: Path) -> list[dict]:
    """``txn-audit scan`` of the copy as the report describes it: every node's copied log dir, as-of the
    copy's wall clock, the cluster's own transaction.max.timeout.ms."""
    from auditor.engine.context import AuditOptions
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    ingest(spark, [str(d) for d in cap.copy.values()], str(out))
    opts = AuditOptions(as_of_ms=cap.as_of_ms, transaction_max_timeout_ms=MAX_TIMEOUT_MS)
    cap.findings = audit(spark, str(out), options=opts).findings
    return cap.findings


def touching(cap: Capture, findings: list[dict]) -> list[dict]:
    """Findings about the transaction left open on orders-1: on that partition, or naming its producer or
    transactional id (the coordinator's own findings are on __transaction_state)."""
    return [f for f in findings
            if (f.get("topic"), f.get("partition")) == (TOPIC, 1)
            or f.get("producer_id") == cap.producer_id or f.get("transactional_id") == cap.transactional_id]


def abort_commands(f: dict) -> list[str]:
    """The commands of ``f`` that abort a transaction: ``kafka-transactions.sh ... abort`` (KIP-664) or
    ``forceTerminateTransaction`` (which aborts through the coordinator)."""
    cmds = [c["command"] for c in f.get("remediation_commands") or []]
    return [c for c in cmds if " abort " in f" {c} " or "forceTerminateTransaction" in c]


def save(cap: Capture, path: Path) -> None:
    """The capture's facts and findings as JSON beside the copies, so the copies can be scanned again (by
    another version of the auditor, with ``--as-of`` and ``--max-timeout-ms`` from here) and compared."""
    facts = asdict(cap)
    facts.update(copy={str(k): str(v) for k, v in cap.copy.items()}, first_offset=cap.first_offset,
                 max_timeout_ms=MAX_TIMEOUT_MS)
    path.write_text(json.dumps(facts, indent=1, default=str))


def describe(cap: Capture) -> str:
    """The capture and its findings on orders-1's transaction, for the test log and issue notes."""
    lines = [f"{cap.variant}: roles {cap.roles}, producer {cap.producer_id} epoch {cap.data_epoch}, open offsets "
             f"{cap.open_offsets}, coordinator {cap.coordinator_state}, orders-1 leader at copy "
             f"{cap.orders1_leader_at_copy}, as-of {cap.as_of_ms} ({cap.as_of_ms - cap.commit_returned_ms} ms "
             f"after the commit returned), landed {cap.landed}, seconds {cap.seconds}"]
    if cap.skip_line:
        lines.append(f"  coordinator: {cap.skip_line.strip()}")
    for f in touching(cap, cap.findings):
        lines.append(f"  {f['rule']} {f['kind']} {f['severity']} {f.get('topic')}-{f.get('partition')}: {f['message']}")
        for c in f.get("remediation_commands") or []:
            lines.append(f"    $ {c['command']}" + (f"  [{c['applies_to']}]" if c.get("applies_to") else ""))
    return "\n".join(lines)
