"""Capture of a transaction coordinator killed just after a commit, on a real Kafka 4.3.1 cluster, for
``tests/test_coordinator_failover.py`` (issue 55, item 5: closed on another replica).

What users saw: a coordinator broker killed just after a commit (3 brokers, RF 3); the new coordinator
completed the transaction, and the crashed broker's copy of the data partition lacks the marker. A
scan of all three log dirs reported the committed transaction as undetermined (warnings) although
another replica in the same input holds its COMMIT. Here three KRaft nodes (each broker+controller)
run with ``__transaction_state`` (one partition) and ``orders`` (one partition) on all three, min ISR 2:

* the coordinator ``C`` (leader of ``__transaction_state-0``) is a *follower* of ``orders-0``, led by
  ``L``; the third node ``X`` follows both;
* Kafka's own Java producer (transaction version 2) commits :data:`PRE_COMMITS` transactions on
  ``orders-0``, then writes one more and flushes (acks=all: all three replicas hold the data);
* ``L`` is frozen (SIGSTOP), the producer commits: the coordinator answers EndTxn once PrepareCommit
  is replicated (``L`` leaves the ISR of ``__transaction_state-0`` after ``replica.lag.time.max.ms``),
  and its marker for ``orders-0`` waits for the frozen leader;
* ``C`` is SIGKILLed the moment ``commitTransaction()`` returns, then ``L`` is thawed. ``C`` could get
  the marker only by fetching it from ``L``, frozen until after the kill: its copy is the behind
  replica the issue is about, whatever the timing (without the freeze, the kill races the marker's
  replication, and a follower fetches within a millisecond or two);
* the controllers fence ``C`` after ``broker.session.timeout.ms``, ``X`` becomes the coordinator,
  loads the PrepareCommit and completes the transaction: the COMMIT marker lands on ``L`` and ``X``;
* every node's log dir is copied during the outage (``C``'s as the kill left it, the others running,
  as an operator's ``cp -a`` would) and scanned as of the copy's wall clock.

What the capture relies on is checked as it goes and raised as :class:`marker_outage.CaptureError`
(who leads what, the data on all three replicas before the commit, the commit told success, no marker
on the killed node's copy, the new coordinator's CompleteCommit, the marker on the two live copies),
so a capture that went differently is never read as an auditor bug. Markers are read with
kafka-python's record reader, not with the auditor's decoders. Seen on Kafka 4.3.1: the thawed leader
sometimes writes the COMMIT twice (the dead coordinator's in-flight WriteTxnMarkers, then the new
coordinator's), two markers the live copies then both hold.

Timings on the 2-core machine: the capture takes 25-40 s (the cluster starts in 10-20 s, the commit
waits 3 s for the frozen leader to leave the ISR of ``__transaction_state-0``, the failover ~10 s:
the controllers fence the killed node after ``broker.session.timeout.ms``), the scan 40-100 s by
the machine's load (74 s in all on a quiet run).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import marker_outage as mo
from scripts.kafka.harness import NEWEST, JavaProducer, KafkaCluster, RawConnection

TOPIC = "orders"
TRANSACTIONAL_ID = "orders-failover"
#: the cluster's transaction.max.timeout.ms, and the audit's --max-timeout-ms
MAX_TIMEOUT_MS = mo.MAX_TIMEOUT_MS
#: committed transactions before the one the coordinator's death catches
PRE_COMMITS = 2
#: replica.lag.time.max.ms: how long the coordinator's PrepareCommit waits for the frozen leader, a
#: follower of __transaction_state-0, before it leaves the ISR (Kafka's 30 s would make the test slow)
LAG_MS = 3_000
#: broker.session.timeout.ms (Kafka's default): longer than the freeze (the frozen leader must not be
#: fenced: orders-0 would move to the coordinator, which could write the marker itself), and how soon
#: the controllers fence the killed coordinator
SESSION_MS = 9_000
#: how long the new coordinator may take to complete the transaction once the old one is killed
COMPLETE_WAIT_S = 60.0

CLUSTER_OVERRIDES: dict[str, object] = {
    "transaction.max.timeout.ms": MAX_TIMEOUT_MS,
    # one __transaction_state partition: one coordinator for the transactional id. Replication factor 3
    # for it and for orders, min ISR 2 for orders: the harness's defaults for three nodes. Min ISR 1 for
    # __transaction_state: once the coordinator is killed, the frozen-then-thawed leader is out of its
    # ISR, and the new coordinator's CompleteCommit would fail with NOT_ENOUGH_REPLICAS and wait ~30 s for
    # its marker thread's next retry (the transaction is completed either way; only the wait differs)
    "transaction.state.log.num.partitions": 1,
    "transaction.state.log.min.isr": 1,
    "replica.lag.time.max.ms": LAG_MS,
    "broker.session.timeout.ms": SESSION_MS,
}


@dataclass
class Roles:
    """The coordinator (killed), the leader of ``orders-0`` (frozen during the commit), the third node,
    and the active controller when the roles were chosen."""

    coordinator: int
    leader: int
    other: int
    controller: int


@dataclass
class Capture:
    """The copy and what the clients and the live cluster said about it (the ground truth)."""

    roles: Roles
    copy: dict[int, Path] = field(default_factory=dict)  # node id -> copied log dir
    as_of_ms: int = 0  # wall clock when the copy was complete
    producer_id: int = -1
    data_epoch: int = -1
    tv2: bool = False
    offsets: list[int] = field(default_factory=list)  # the committed transaction's data offsets on orders-0
    isr_before: list[int] = field(default_factory=list)  # orders-0's ISR before the freeze
    commit_returned_ms: int = 0
    killed_ms: int = 0
    new_coordinator: int = -1
    coordinator_state: str = ""  # DescribeTransactions at the new coordinator, before the copy
    markers_in_copy: dict[int, list] = field(default_factory=dict)  # node -> the producer's markers after the data
    copy_vanished: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    findings: list[dict] = field(default_factory=list)

    @property
    def first_offset(self) -> int:
        return min(self.offsets)


# -- the cluster ----------------------------------------------------------------------------------
def start_cluster(workdir: Path) -> KafkaCluster:
    """Three nodes with :data:`CLUSTER_OVERRIDES`, small heaps (2 cores: three JVMs, then Spark)."""
    cluster = KafkaCluster(NEWEST, workdir, 3, CLUSTER_OVERRIDES, heap="256m")
    cluster.start()
    return cluster


def partition_state(bootstrap: str, topic: str, partition: int) -> tuple[int, list[int]]:
    """(leader, ISR) of the partition as the node at ``bootstrap`` has them (a Metadata request to that
    node alone: an admin client might pick the frozen or the killed node)."""
    from kafka.protocol.metadata import MetadataRequest

    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)
    with RawConnection(bootstrap, timeout=10) as conn:
        resp = conn.call(req, 9)
    t = resp.topics[0]
    p = next((p for p in t.partitions if p.partition_index == partition), None)
    if t.error_code != 0 or p is None:
        raise mo.CaptureError(f"metadata of {topic}-{partition} from {bootstrap}: error {t.error_code}")
    return p.leader_id, sorted(p.isr_nodes)


def choose_roles(cluster: KafkaCluster) -> Roles:
    """The coordinator is whoever leads ``__transaction_state-0``; the leader of ``orders-0`` (to freeze)
    is another node, where the two others allow not the active controller (no election while frozen)."""
    nodes = sorted(cluster.nodes)
    some = cluster.nodes[nodes[0]].bootstrap
    coordinator = mo.wait_for("__transaction_state-0 has a leader",
                              lambda: max(partition_state(some, "__transaction_state", 0)[0], 0), 30)
    controller = mo.active_controller(cluster)
    candidates = [n for n in nodes if n != coordinator]
    leader = next((n for n in candidates if n != controller), candidates[0])
    other = next(n for n in candidates if n != leader)
    return Roles(coordinator=coordinator, leader=leader, other=other, controller=controller)


def create_orders(cluster: KafkaCluster, roles: Roles) -> None:
    """``orders`` with one partition on all three nodes, led by ``roles.leader``, the coordinator last."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(TOPIC, 1, replica_assignment=[[roles.leader, roles.other, roles.coordinator]])
    for f in admin.create_topics([topic]).values():
        f.result(30)
    want = (roles.leader, sorted(cluster.nodes))
    mo.wait_for(f"{TOPIC}-0 led by {roles.leader} with all nodes in sync",
                lambda: partition_state(cluster.nodes[roles.other].bootstrap, TOPIC, 0) == want, 30)


def describe_state(bootstrap: str, transactional_id: str) -> str:
    """The transaction's state at the coordinator at ``bootstrap`` (DescribeTransactions, KIP-664)."""
    from kafka.protocol.admin.transactions import DescribeTransactionsRequest

    with RawConnection(bootstrap, timeout=10) as conn:
        resp = conn.call(DescribeTransactionsRequest(transactional_ids=[transactional_id]), 0)
    st = resp.transaction_states[0]
    if st.error_code != 0:
        raise mo.CaptureError(f"DescribeTransactions {transactional_id} at {bootstrap}: error {st.error_code}")
    return st.transaction_state


# -- the transaction and the failover ---------------------------------------------------------------
def write_transactions(cluster: KafkaCluster, cap: Capture, p: JavaProducer) -> None:
    """:data:`PRE_COMMITS` committed transactions on orders-0, then the one the kill catches, flushed:
    acks=all, so every replica in sync (all three, checked) holds its data before the commit."""
    for i in range(PRE_COMMITS):
        p.call("begin")
        p.call("send", TOPIC, 0, f"c{i}")
        p.call("flush")  # the bridge reports the records sent since the last flush: these are not the caught ones
        p.call("commit")
    p.call("begin")
    for i in range(2):
        p.call("send", TOPIC, 0, f"caught-{i}")
    cap.offsets = [r["offset"] for r in p.call("flush")["records"]]
    cap.producer_id, cap.data_epoch, cap.tv2 = p.state["producer_id"], p.state["producer_epoch"], p.state["tv2"]
    leader, cap.isr_before = partition_state(cluster.nodes[cap.roles.other].bootstrap, TOPIC, 0)
    if leader != cap.roles.leader or cap.isr_before != sorted(cluster.nodes):
        raise mo.CaptureError(f"before the commit {TOPIC}-0 is led by {leader} with ISR {cap.isr_before}, not "
                              f"{cap.roles.leader} with every node")
    held = mo.control_batches(cluster.nodes[cap.roles.coordinator].log_dir / f"{TOPIC}-0")
    if not any(b["offset"] == cap.first_offset and b["producer_id"] == cap.producer_id for b in held):
        raise mo.CaptureError(f"the coordinator's replica of {TOPIC}-0 lacks the data at offset {cap.first_offset}")


def commit_and_kill(cluster: KafkaCluster, cap: Capture, p: JavaProducer) -> None:
    """With the leader of orders-0 frozen: ``commitTransaction()`` (it must succeed), SIGKILL of the
    coordinator the moment it returns, then the leader thawed. The killed node's copy of orders-0 must
    lack the marker: it could only have fetched it from the frozen leader."""
    coordinator = cluster.nodes[cap.roles.coordinator]
    with mo.frozen(cluster, cap.roles.leader) as thaw:
        t0 = time.monotonic()
        st = p.call("commit", check=False)
        cap.commit_returned_ms = int(time.time() * 1000)
        coordinator.kill()
        cap.killed_ms = int(time.time() * 1000)
        cap.seconds["commit"] = round(time.monotonic() - t0, 1)
        thaw()
    if not st.get("ok"):
        raise mo.CaptureError(f"commitTransaction failed: {st.get('error')} (the scenario needs the client told "
                              "success: the coordinator answers EndTxn once PrepareCommit is replicated)")
    late = mo.markers_after(coordinator.log_dir / f"{TOPIC}-0", cap.producer_id, cap.first_offset)
    if late:
        raise mo.CaptureError(f"the killed coordinator's replica of {TOPIC}-0 holds the marker {late}: there is no "
                              "replica behind")


def await_completion(cluster: KafkaCluster, cap: Capture) -> None:
    """The new coordinator (not the killed node) completes the transaction, and the COMMIT marker lands
    on the two live replicas of orders-0."""
    t0 = time.monotonic()
    other = cluster.nodes[cap.roles.other].bootstrap
    cap.new_coordinator = mo.wait_for(
        "a new coordinator for __transaction_state-0",
        lambda: next((n for n in [partition_state(other, "__transaction_state", 0)[0]]
                      if n not in (cap.roles.coordinator, -1)), 0), COMPLETE_WAIT_S, 0.5)
    new = cluster.nodes[cap.new_coordinator].bootstrap
    mo.wait_for("CompleteCommit at the new coordinator",
                lambda: describe_state(new, TRANSACTIONAL_ID) == "CompleteCommit", COMPLETE_WAIT_S, 0.5)
    cap.coordinator_state = "CompleteCommit"
    for n in (cap.roles.leader, cap.roles.other):
        live = cluster.nodes[n].log_dir / f"{TOPIC}-0"
        mo.wait_for(f"the COMMIT marker on node {n}'s {TOPIC}-0",
                    lambda: [m["control"] for m in mo.markers_after(live, cap.producer_id, cap.first_offset)][:1]
                    == ["COMMIT"], 30, 0.25)
    cap.seconds["failover"] = round(time.monotonic() - t0, 1)


def copy_and_check(cluster: KafkaCluster, cap: Capture, dest: Path) -> None:
    """Copy every node's log dir (the killed one as it was left), then check the copy holds the case:
    the data on all three copies, no marker after it on the killed node's (whose log dir was not cleanly
    stopped) and a COMMIT marker on the two others."""
    t0 = time.monotonic()
    cap.copy, cap.as_of_ms, cap.copy_vanished = mo.copy_log_dirs(cluster, dest)
    cap.seconds["copy"] = round(time.monotonic() - t0, 2)
    for n, d in cap.copy.items():
        part = d / f"{TOPIC}-0"
        if not any(b["offset"] == cap.first_offset and b["producer_id"] == cap.producer_id and not b["control"]
                   for b in mo.control_batches(part)):
            raise mo.CaptureError(f"node {n}'s copy of {TOPIC}-0 lacks the data at offset {cap.first_offset}")
        cap.markers_in_copy[n] = mo.markers_after(part, cap.producer_id, cap.first_offset)
    if cap.markers_in_copy[cap.roles.coordinator]:
        raise mo.CaptureError(f"the killed node's copy holds {cap.markers_in_copy[cap.roles.coordinator]}")
    if (cap.copy[cap.roles.coordinator] / ".kafka_cleanshutdown").exists():
        raise mo.CaptureError("the killed node's log dir holds .kafka_cleanshutdown")
    for n in (cap.roles.leader, cap.roles.other):
        if [m["control"] for m in cap.markers_in_copy[n]][:1] != ["COMMIT"]:
            raise mo.CaptureError(f"node {n}'s copy of {TOPIC}-0 has {cap.markers_in_copy[n]} after the data, "
                                  "not the COMMIT marker")


def capture(cluster: KafkaCluster, work: Path) -> Capture:
    """The whole scenario on a started cluster (see the module); the cluster is the caller's to kill."""
    t0 = time.monotonic()
    p = mo.start_producer(cluster, TRANSACTIONAL_ID, work)  # its init creates __transaction_state
    try:
        roles = choose_roles(cluster)
        create_orders(cluster, roles)
        cap = Capture(roles)
        write_transactions(cluster, cap, p)
        cap.seconds["setup"] = round(time.monotonic() - t0, 1)
        commit_and_kill(cluster, cap, p)
    finally:
        p.close()
    await_completion(cluster, cap)
    copy_and_check(cluster, cap, work / "copy")
    cap.seconds["total"] = round(time.monotonic() - t0, 1)
    return cap


# -- the audit ------------------------------------------------------------------------------------
def scan(spark, cap: Capture, out: Path) -> list[dict]:
    """``txn-audit scan`` of the three copied log dirs, as of the copy's wall clock, with the cluster's
    own transaction.max.timeout.ms."""
    from auditor.engine.context import AuditOptions
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    ingest(spark, [str(d) for d in cap.copy.values()], str(out))
    opts = AuditOptions(as_of_ms=cap.as_of_ms, transaction_max_timeout_ms=MAX_TIMEOUT_MS)
    cap.findings = audit(spark, str(out), options=opts).findings
    return cap.findings


def touching(cap: Capture, findings: list[dict]) -> list[dict]:
    """Findings about the committed transaction: on orders-0, or naming its producer or transactional id."""
    return [f for f in findings
            if (f.get("topic"), f.get("partition")) == (TOPIC, 0)
            or f.get("producer_id") == cap.producer_id or f.get("transactional_id") == TRANSACTIONAL_ID]


def save(cap: Capture, path: Path) -> None:
    """The capture's facts and findings as JSON beside the copies (to scan them again and compare)."""
    facts = asdict(cap)
    facts.update(copy={str(k): str(v) for k, v in cap.copy.items()}, first_offset=cap.first_offset,
                 max_timeout_ms=MAX_TIMEOUT_MS)
    path.write_text(json.dumps(facts, indent=1, default=str))


def describe(cap: Capture) -> str:
    """The capture and its findings on the transaction, for the test log."""
    lines = [f"roles {cap.roles}, producer {cap.producer_id} epoch {cap.data_epoch} (tv2 {cap.tv2}), offsets "
             f"{cap.offsets}, killed {cap.killed_ms - cap.commit_returned_ms} ms after the commit returned, new "
             f"coordinator {cap.new_coordinator} ({cap.coordinator_state}), markers in the copy "
             f"{ {n: [(m['offset'], m['control']) for m in ms] for n, ms in cap.markers_in_copy.items()} }, "
             f"seconds {cap.seconds}"]
    for f in touching(cap, cap.findings):
        lines.append(f"  {f['rule']} {f['kind']} {f['severity']} broker {f.get('broker_id')} "
                     f"{f.get('topic')}-{f.get('partition')}: {f['message']}")
    return "\n".join(lines)
